// The app module. The native libraries are not built by Gradle: README.md builds libedgespec.so
// and libedgespec_jni.so with the NDK and copies them to src/main/jniLibs/arm64-v8a.
plugins {
    id("com.android.application")
    id("org.jetbrains.kotlin.android")
}

android {
    namespace = "org.edgespec.demo"
    compileSdk = 34
    defaultConfig {
        applicationId = "org.edgespec.demo"
        minSdk = 26
        targetSdk = 34
        versionCode = 1
        versionName = "0.1"
        ndk { abiFilters += "arm64-v8a" }
    }
    sourceSets["main"].java.srcDirs("src/main/java", "src/main/kotlin")
    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
    kotlinOptions { jvmTarget = "17" }
}
