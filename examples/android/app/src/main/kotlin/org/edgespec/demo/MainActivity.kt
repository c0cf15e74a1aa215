// MainActivity.kt: a one-screen app around org.edgespec.EdgeSpec: a prompt, a "speculative"
// switch, Generate; tokens appear as they are produced. The model and adapter are read from the
// app's files directory (copied there with `adb push`, README.md). Generation runs on a worker
// thread; text reaches the screen through runOnUiThread.
package org.edgespec.demo

import android.app.Activity
import android.os.Bundle
import android.widget.Button
import android.widget.EditText
import android.widget.Switch
import android.widget.TextView
import org.edgespec.EdgeSpec
import java.io.File
import java.util.concurrent.Executors

class MainActivity : Activity() {
    private val worker = Executors.newSingleThreadExecutor()
    private var model: EdgeSpec? = null

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        setContentView(R.layout.main)
        val prompt = findViewById<EditText>(R.id.prompt)
        val speculative = findViewById<Switch>(R.id.speculative)
        val output = findViewById<TextView>(R.id.output)
        val generate = findViewById<Button>(R.id.generate)

        worker.execute {
            val dir = getExternalFilesDir(null) ?: filesDir
            val result = runCatching {
                EdgeSpec(File(dir, "default.gguf").path, File(dir, "default.ss.gguf").path, 0, 1024)
            }
            runOnUiThread {
                result.onSuccess { model = it; generate.isEnabled = true }
                    .onFailure { output.text = "cannot load the model from $dir: ${it.message}" }
            }
        }
        generate.isEnabled = false
        generate.setOnClickListener {
            val m = model ?: return@setOnClickListener
            output.text = ""
            generate.isEnabled = false
            val text = prompt.text.toString()
            val spec = speculative.isChecked
            worker.execute {
                val stats = runCatching {
                    m.generate(text, 128, spec, object : EdgeSpec.TextCallback() {
                        override fun onText(text: String): Boolean {
                            runOnUiThread { output.append(text) }
                            return !isFinishing
                        }
                    })
                }
                runOnUiThread {
                    stats.onSuccess { output.append("\n\n${it.generated} tokens, ${it.forwardCalls} forward calls") }
                        .onFailure { output.append("\n\nerror: ${it.message}") }
                    generate.isEnabled = true
                }
            }
        }
    }

    override fun onDestroy() {
        // close on the worker, after any generation in flight
        worker.execute { model?.close() }
        worker.shutdown()
        super.onDestroy()
    }
}
