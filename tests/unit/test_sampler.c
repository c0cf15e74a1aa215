/* test_sampler.c: the sampler: greedy ties, the position-keyed stream (determinism in any call
 * order, uniformity), each filter's effect against an independent brute-force computation, sampled
 * frequencies against the filtered softmax (chi-square with fixed seeds), the repetition penalty,
 * zeroed params (greedy; each zero means its default), invalid parameters and inputs, allocation
 * failure. */
#include "edgespec.h"
#include "sampler.h"

#include "../common/test_alloc.h"
#include "../test.h"

#include <stdint.h>

static es_sampler *make(int32_t n_vocab, float temp, int32_t top_k, float top_p, float min_p, uint64_t seed) {
    es_sampler_params p = es_sampler_default_params();
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    es_sampler *s = NULL;
    CHECK_OK(es_sampler_create(n_vocab, &p, NULL, &s));
    return s;
}

static int32_t sample1(es_sampler *s, const float *logits, int64_t pos) {
    int32_t t = -1;
    CHECK_OK(es_sample(s, logits, pos, NULL, 0, &t));
    return t;
}

/* ---- independent reference for the filtered distribution: full sorts in double precision */

typedef struct ref_cand {
    double p;
    int id;
} ref_cand;

static int ref_cmp(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

/* probs[n] gets the probability of each token under temperature, top-k, top-p, min-p. */
static void ref_dist(const float *l, int n, double temp, int top_k, double top_p, double min_p, double *probs) {
    ref_cand *c = malloc(sizeof *c * (size_t)n);
    double lmax = -INFINITY;
    for (int i = 0; i < n; i++) lmax = l[i] > lmax ? l[i] : lmax;
    for (int i = 0; i < n; i++) c[i] = (ref_cand){exp(((double)l[i] - lmax) / temp), i};
    qsort(c, (size_t)n, sizeof *c, ref_cmp);
    int m = top_k > 0 && top_k < n ? top_k : n;
    double total = 0;
    for (int i = 0; i < m; i++) total += c[i].p;
    if (top_p < 1.0) {
        double cum = 0;
        for (int i = 0; i < m; i++) {
            cum += c[i].p;
            if (cum >= top_p * total) {
                m = i + 1;
                break;
            }
        }
    }
    int kept = 0;
    for (int i = 0; i < m; i++)
        if (c[i].p >= min_p * c[0].p) kept = i + 1;
    total = 0;
    for (int i = 0; i < kept; i++) total += c[i].p;
    for (int i = 0; i < n; i++) probs[i] = 0;
    for (int i = 0; i < kept; i++) probs[c[i].id] = c[i].p / total;
    free(c);
}

/* Chi-square of counts against probs over the tokens with probs > 0; also counts draws of
 * tokens with probability 0 (must be none). */
static double chi_square(const long *counts, const double *probs, int n, long total, int *df, long *impossible) {
    double x2 = 0;
    *df = -1;
    *impossible = 0;
    for (int i = 0; i < n; i++) {
        if (probs[i] == 0) {
            *impossible += counts[i];
            continue;
        }
        double e = probs[i] * (double)total;
        x2 += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
        (*df)++;
    }
    return x2;
}

/* Critical chi-square values at p = 0.001 for df 1..12 (from the distribution's tables). */
static const double chi2_crit_001[13] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46,
                                         24.32, 26.12, 27.88, 29.59, 31.26, 32.91};

static void check_frequencies(const float *l, int n, float temp, int top_k, float top_p, float min_p,
                              uint64_t seed, long draws) {
    double probs[16];
    long counts[16] = {0};
    ref_dist(l, n, temp, top_k, top_p, min_p, probs);
    es_sampler *s = make(n, temp, top_k, top_p, min_p, seed);
    for (long pos = 0; pos < draws; pos++) {
        int32_t t = sample1(s, l, pos);
        CHECK(t >= 0 && t < n);
        if (t >= 0 && t < n) counts[t]++;
    }
    es_sampler_free(s);
    int df;
    long impossible;
    double x2 = chi_square(counts, probs, n, draws, &df, &impossible);
    CHECKF(impossible == 0, "%ld draws of filtered-out tokens (T %g k %d p %g min_p %g)", impossible, (double)temp,
           top_k, (double)top_p, (double)min_p);
    CHECKF(df >= 1 && df <= 12 && x2 < chi2_crit_001[df], "chi-square %.2f with %d degrees of freedom (T %g k %d p %g min_p %g)",
           x2, df, (double)temp, top_k, (double)top_p, (double)min_p);
}

static void test_greedy(void) {
    es_sampler *s = make(6, 0.0f, 0, 1.0f, 0.0f, 1);
    float ties[6] = {1, 3, 2, 3, 3, -1};
    for (int64_t pos = 0; pos < 50; pos++) CHECK(sample1(s, ties, pos) == 1);
    float all_equal[6] = {0, 0, 0, 0, 0, 0};
    CHECK(sample1(s, all_equal, 7) == 0);
    float masked[6] = {-INFINITY, -INFINITY, -5, -INFINITY, -5, -7};
    CHECK(sample1(s, masked, 3) == 2);
    float last[6] = {-1, -1, -1, -1, -1, 0};
    CHECK(sample1(s, last, 3) == 5);
    es_sampler_free(s);
    /* top_k == 1 is greedy at any temperature */
    s = make(6, 5.0f, 1, 1.0f, 0.0f, 1);
    for (int64_t pos = 0; pos < 50; pos++) CHECK(sample1(s, ties, pos) == 1);
    es_sampler_free(s);
}

static void test_uniform_stream(void) {
    /* pure and order-independent */
    double a = es_sampler_uniform(42, 1000), b = es_sampler_uniform(42, 999);
    CHECK(es_sampler_uniform(42, 1000) == a && es_sampler_uniform(42, 999) == b && a != b);
    CHECK(es_sampler_uniform(43, 1000) != a);
    /* uniform in [0, 1) along positions and along seeds: 64 buckets, chi-square at p = 0.001
     * for 63 degrees of freedom is 103.4 */
    const long n = 64000;
    long bp[64] = {0}, bs[64] = {0};
    double lo = 1, hi = 0;
    for (long i = 0; i < n; i++) {
        double u = es_sampler_uniform(7, i), v = es_sampler_uniform((uint64_t)i, 5);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        CHECK(u >= 0 && u < 1 && v >= 0 && v < 1);
        bp[(int)(u * 64)]++;
        bs[(int)(v * 64)]++;
    }
    double xp = 0, xs = 0, e = (double)n / 64;
    for (int k = 0; k < 64; k++) {
        xp += (bp[k] - e) * (bp[k] - e) / e;
        xs += (bs[k] - e) * (bs[k] - e) / e;
    }
    CHECKF(xp < 103.4, "positions: chi-square %.1f", xp);
    CHECKF(xs < 103.4, "seeds: chi-square %.1f", xs);
    CHECK(lo < 0.001 && hi > 0.999);
    /* neighbouring positions are not correlated: lag-1 serial correlation near 0 */
    double sxy = 0, sx = 0, sxx = 0;
    for (long i = 0; i < n; i++) {
        double x = es_sampler_uniform(9, i), y = es_sampler_uniform(9, i + 1);
        sxy += x * y;
        sx += x;
        sxx += x * x;
    }
    double mean = sx / n, var = sxx / n - mean * mean, corr = (sxy / n - mean * mean) / var;
    CHECKF(fabs(corr) < 0.02, "lag-1 correlation %.4f", corr);
}

static void test_determinism(void) {
    enum { V = 200, N = 300 };
    test_rng rng = {11};
    float *logits = malloc(sizeof(float) * V * N);
    for (int i = 0; i < V * N; i++) logits[i] = 3.0f * test_rng_uniform(&rng);
    int32_t fwd[N], bwd[N], other_seed[N];
    es_sampler *s = make(V, 1.0f, 50, 0.9f, 0.02f, 1234);
    for (int i = 0; i < N; i++) fwd[i] = sample1(s, logits + (size_t)i * V, 1000 + i);
    es_sampler_free(s);
    /* a fresh sampler, positions visited backwards and interleaved with unrelated calls */
    s = make(V, 1.0f, 50, 0.9f, 0.02f, 1234);
    for (int i = N - 1; i >= 0; i--) {
        (void)sample1(s, logits + (size_t)((i * 7) % N) * V, 5 + i);
        bwd[i] = sample1(s, logits + (size_t)i * V, 1000 + i);
    }
    es_sampler_free(s);
    s = make(V, 1.0f, 50, 0.9f, 0.02f, 1235);
    int same = 0;
    for (int i = 0; i < N; i++) {
        other_seed[i] = sample1(s, logits + (size_t)i * V, 1000 + i);
        same += other_seed[i] == fwd[i];
    }
    es_sampler_free(s);
    int mismatches = 0;
    for (int i = 0; i < N; i++) mismatches += fwd[i] != bwd[i];
    CHECKF(mismatches == 0, "%d of %d positions differ when called in another order", mismatches, N);
    CHECKF(same < N / 2, "another seed gave the same token at %d of %d positions", same, N);
    /* the draw is the one es_sampler_uniform reports: reproduce it from the distribution */
    s = make(V, 1.0f, 50, 0.9f, 0.02f, 1234);
    for (int i = 0; i < N; i++) {
        es__dist d;
        CHECK_OK(es__sampler_dist(s, logits + (size_t)i * V, NULL, 0, &d));
        CHECK(es__dist_draw(&d, es_sampler_uniform(1234, 1000 + i)) == fwd[i]);
    }
    es_sampler_free(s);
    free(logits);
}

/* The distribution's candidate set and probabilities against the full-sort reference. */
static void check_dist(const float *l, int n, float temp, int top_k, float top_p, float min_p) {
    double *probs = malloc(sizeof(double) * (size_t)n);
    ref_dist(l, n, temp, top_k, top_p, min_p, probs);
    es_sampler *s = make(n, temp, top_k, top_p, min_p, 0);
    es__dist d;
    CHECK_OK(es__sampler_dist(s, l, NULL, 0, &d));
    int ref_n = 0, bad = 0;
    for (int i = 0; i < n; i++) ref_n += probs[i] > 0;
    for (int i = 0; i < d.n; i++) {
        if (i > 0 && d.ids[i] <= d.ids[i - 1]) bad++;
        double p = d.w[i] / d.total, want = probs[d.ids[i]];
        if (!(fabs(p - want) <= 1e-6 * want)) bad++;
    }
    CHECKF(d.n == ref_n && bad == 0, "T %g k %d p %g min_p %g: %d candidates, reference %d, %d mismatches",
           (double)temp, top_k, (double)top_p, (double)min_p, d.n, ref_n, bad);
    es_sampler_free(s);
    free(probs);
}

static void test_filters(void) {
    /* probabilities 0.5 0.3 0.15 0.05 at T = 1, ids shuffled */
    float l[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
    es__dist d;
    es_sampler *s = make(4, 1.0f, 2, 1.0f, 0.0f, 0); /* top-k 2: {1, 3} */
    CHECK_OK(es__sampler_dist(s, l, NULL, 0, &d));
    CHECK(d.n == 2 && d.ids[0] == 1 && d.ids[1] == 3);
    es_sampler_free(s);
    s = make(4, 1.0f, 0, 0.7f, 0.0f, 0); /* top-p 0.7: 0.5 < 0.7 <= 0.8 */
    CHECK_OK(es__sampler_dist(s, l, NULL, 0, &d));
    CHECK(d.n == 2 && d.ids[0] == 1 && d.ids[1] == 3);
    es_sampler_free(s);
    s = make(4, 1.0f, 0, 0.85f, 0.0f, 0); /* top-p 0.85: three tokens */
    CHECK_OK(es__sampler_dist(s, l, NULL, 0, &d));
    CHECK(d.n == 3 && d.ids[0] == 0 && d.ids[1] == 1 && d.ids[2] == 3);
    es_sampler_free(s);
    s = make(4, 1.0f, 0, 1.0f, 0.2f, 0); /* min-p 0.2: 0.05 / 0.5 = 0.1 dropped */
    CHECK_OK(es__sampler_dist(s, l, NULL, 0, &d));
    CHECK(d.n == 3 && d.ids[0] == 0 && d.ids[1] == 1 && d.ids[2] == 3);
    es_sampler_free(s);
    s = make(4, 1.0f, 0, 1.0f, 0.5f, 0); /* min-p 0.5: 0.3 / 0.5 kept, 0.15 / 0.5 dropped */
    CHECK_OK(es__sampler_dist(s, l, NULL, 0, &d));
    CHECK(d.n == 2 && d.ids[0] == 1 && d.ids[1] == 3);
    CHECK(fabs(d.w[0] / d.total - 0.625) < 1e-6 && fabs(d.w[1] / d.total - 0.375) < 1e-6);
    es_sampler_free(s);
    /* top-k ties at the boundary keep the lower ids */
    float tie[5] = {1, 4, 4, 5, 4};
    s = make(5, 1.0f, 3, 1.0f, 0.0f, 0);
    CHECK_OK(es__sampler_dist(s, tie, NULL, 0, &d));
    CHECK(d.n == 3 && d.ids[0] == 1 && d.ids[1] == 2 && d.ids[2] == 3);
    es_sampler_free(s);
    /* -inf logits are never candidates, even without filters */
    float masked[4] = {0, -INFINITY, 1, -INFINITY};
    s = make(4, 1.0f, 0, 1.0f, 0.0f, 0);
    CHECK_OK(es__sampler_dist(s, masked, NULL, 0, &d));
    CHECK(d.n == 2 && d.ids[0] == 0 && d.ids[1] == 2);
    for (int64_t pos = 0; pos < 200; pos++) {
        int32_t t = sample1(s, masked, pos);
        CHECK(t == 0 || t == 2);
    }
    es_sampler_free(s);
    /* a very low temperature concentrates on the argmax */
    s = make(4, 0.01f, 0, 1.0f, 0.0f, 3);
    for (int64_t pos = 0; pos < 200; pos++) CHECK(sample1(s, l, pos) == 1);
    es_sampler_free(s);

    /* against the full-sort reference on a large vocabulary (exercises the partial top-p sort) */
    enum { V = 32000 };
    float *big = malloc(sizeof(float) * V);
    test_rng rng = {5};
    for (int i = 0; i < V; i++) {
        float g = test_rng_uniform(&rng) + test_rng_uniform(&rng) + test_rng_uniform(&rng);
        big[i] = 4.0f * g;
    }
    big[777] = big[778] = 13.0f; /* a tie at the top */
    const float temps[3] = {0.5f, 1.0f, 2.0f};
    const float top_ps[4] = {0.3f, 0.9f, 0.99f, 1.0f};
    for (int t = 0; t < 3; t++)
        for (int p = 0; p < 4; p++) {
            check_dist(big, V, temps[t], 0, top_ps[p], 0.0f);
            check_dist(big, V, temps[t], 40, top_ps[p], 0.05f);
        }
    check_dist(big, V, 1.0f, 0, 1.0f, 0.01f);
    check_dist(big, V, 1.0f, 1000, 0.95f, 0.0f);
    /* many exact ties: the top-p boundary falls inside a run of equal weights */
    for (int i = 0; i < V; i++) big[i] = (float)(test_rng_u64(&rng) % 7);
    const float tie_ps[4] = {0.05f, 0.3f, 0.77f, 0.999f};
    for (int p = 0; p < 4; p++) check_dist(big, V, 1.0f, 0, tie_ps[p], 0.0f);
    /* a spread past e^-87: far tokens get probability 0, the rest match the reference */
    for (int i = 0; i < V; i++) big[i] = -200.0f * (float)i / V;
    es_sampler *far = make(V, 1.0f, 0, 1.0f, 0.0f, 0);
    CHECK_OK(es__sampler_dist(far, big, NULL, 0, &d));
    CHECKF(d.n == (int)(87.0 * V / 200.0) + 1, "%d candidates within e^-87 of the best", d.n);
    CHECK(d.ids[0] == 0 && d.w[0] == 1.0);
    for (int i = 0; i < d.n; i++)
        CHECKF(d.ids[i] == i && fabs(d.w[i] - exp((double)big[i])) <= 1e-6 * exp((double)big[i]), "token %d", i);
    es_sampler_free(far);
    free(big);
}

static void test_frequencies(void) {
    float l[10];
    test_rng rng = {77};
    for (int i = 0; i < 10; i++) l[i] = 2.0f * test_rng_uniform(&rng);
    check_frequencies(l, 10, 1.0f, 0, 1.0f, 0.0f, 1, 200000);
    check_frequencies(l, 10, 0.7f, 0, 1.0f, 0.0f, 2, 200000);
    check_frequencies(l, 10, 1.5f, 6, 1.0f, 0.0f, 3, 200000);
    check_frequencies(l, 10, 1.0f, 0, 0.8f, 0.0f, 4, 200000);
    check_frequencies(l, 10, 1.0f, 8, 0.9f, 0.2f, 5, 200000);
    /* the test can fail: counts from a different distribution are rejected */
    double probs[10];
    long counts[10];
    ref_dist(l, 10, 1.0, 0, 1.0, 0.0, probs);
    int hi = 0, lo = 0;
    for (int i = 0; i < 10; i++) {
        hi = probs[i] > probs[hi] ? i : hi;
        lo = probs[i] < probs[lo] ? i : lo;
    }
    for (int i = 0; i < 10; i++) counts[i] = (long)(probs[i] * 200000);
    counts[hi] -= 1000; /* move 0.5% of the draws */
    counts[lo] += 1000;
    int df;
    long impossible;
    CHECK(chi_square(counts, probs, 10, 200000, &df, &impossible) > chi2_crit_001[df]);
}

static void test_repetition_penalty(void) {
    es_sampler_params p = es_sampler_default_params();
    p.temperature = 0;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    es_sampler *s;
    CHECK_OK(es_sampler_create(4, &p, NULL, &s));
    float l[4] = {2.0f, -1.0f, 1.5f, 0.5f};
    int32_t t;
    int32_t h1[3] = {3, 0, 1}; /* 0 penalised: 2 / 2 = 1 < 1.5 */
    CHECK_OK(es_sample(s, l, 3, h1, 3, &t));
    CHECK(t == 2);
    int32_t h2[3] = {0, 3, 3}; /* 0 outside the last 2 */
    CHECK_OK(es_sample(s, l, 3, h2, 3, &t));
    CHECK(t == 0);
    es_sampler_free(s);
    /* exact penalised weights at T = 1: divide positive, multiply negative, once per distinct
     * token, whole history with repeat_last_n = -1 */
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_last_n = -1;
    CHECK_OK(es_sampler_create(4, &p, NULL, &s));
    int32_t h3[6] = {0, 1, 0, 0, 1, 0};
    es__dist d;
    CHECK_OK(es__sampler_dist(s, l, h3, 6, &d));
    double want[4] = {exp(1.0), exp(-2.0), exp(1.5), exp(0.5)}, z = 0;
    for (int i = 0; i < 4; i++) z += want[i];
    CHECK(d.n == 4);
    for (int i = 0; i < 4 && d.n == 4; i++)
        CHECKF(fabs(d.w[i] / d.total - want[i] / z) < 1e-6, "token %d: %g vs %g", i, d.w[i] / d.total, want[i] / z);
    /* logits are not modified and the penalty does not leak into the next call */
    CHECK(l[0] == 2.0f && l[1] == -1.0f);
    CHECK_OK(es__sampler_dist(s, l, NULL, 0, &d));
    CHECK(d.n == 4 && fabs(d.w[0] / d.total - exp(2.0) / (exp(2.0) + exp(-1.0) + exp(1.5) + exp(0.5))) < 1e-6);
    es_sampler_free(s);
}

/* Two samplers give the same distribution and draws for logits l (n tokens) and history h. */
static bool same_dist(es_sampler *a, es_sampler *b, const float *l, const int32_t *h, size_t n_h) {
    bool same = true;
    es__dist da, db;
    CHECK_OK(es__sampler_dist(a, l, h, n_h, &da));
    int32_t n = da.n, ids[64];
    double w[64];
    for (int32_t i = 0; i < n && i < 64; i++) ids[i] = da.ids[i], w[i] = da.w[i];
    CHECK_OK(es__sampler_dist(b, l, h, n_h, &db));
    same = n == db.n && n <= 64;
    for (int32_t i = 0; same && i < n; i++) same = ids[i] == db.ids[i] && w[i] == db.w[i];
    for (int64_t pos = 0; same && pos < 40; pos++) {
        int32_t ta = -1, tb = -2;
        CHECK_OK(es_sample(a, l, pos, h, n_h, &ta));
        CHECK_OK(es_sample(b, l, pos, h, n_h, &tb));
        same = ta == tb;
    }
    return same;
}

static void test_zero_params(void) {
    /* NULL and zeroed params are valid and greedy: es_sampler_default_params() is the zeroed struct */
    es_sampler_params z = es_sampler_default_params();
    CHECK(z.temperature == 0.0f && z.top_k == 0 && z.top_p == 0.0f && z.min_p == 0.0f && z.repeat_penalty == 0.0f &&
          z.repeat_last_n == 0 && z.seed == 0);
    memset(&z, 0, sizeof z);
    CHECK_OK(es__sampler_params_check(&z, NULL));
    es_sampler *sz = NULL, *sn = NULL;
    CHECK_OK(es_sampler_create(6, &z, NULL, &sz));
    CHECK_OK(es_sampler_create(6, NULL, NULL, &sn));
    test_rng rng = {99};
    for (int r = 0; r < 20 && sz && sn; r++) {
        float l[6];
        int best = 0;
        for (int i = 0; i < 6; i++) {
            l[i] = 4.0f * test_rng_uniform(&rng);
            best = l[i] > l[best] ? i : best;
        }
        int32_t hist[3] = {best, best, (best + 1) % 6}; /* no penalty unless asked for */
        es__dist d;
        CHECK_OK(es__sampler_dist(sz, l, hist, 3, &d));
        CHECK(d.n == 1 && d.ids[0] == best);
        for (int64_t pos = 0; pos < 5; pos++) {
            int32_t t = -1;
            CHECK_OK(es_sample(sn, l, pos, hist, 3, &t));
            CHECK(t == best);
        }
    }
    es_sampler_free(sz);
    es_sampler_free(sn);

    /* top_p 0 is top_p 1 (off), repeat_penalty 0 is 1 (off): the same distributions and draws */
    float l[40];
    int32_t hist[100];
    for (int i = 0; i < 40; i++) l[i] = 2.0f * test_rng_uniform(&rng);
    for (int i = 0; i < 100; i++) hist[i] = (int32_t)(test_rng_u64(&rng) % 40);
    es_sampler_params a = z, b = z;
    a.temperature = b.temperature = 1.0f;
    a.seed = b.seed = 5;
    b.top_p = 1.0f;
    b.repeat_penalty = 1.0f;
    es_sampler *sa = NULL, *sb = NULL;
    CHECK_OK(es_sampler_create(40, &a, NULL, &sa));
    CHECK_OK(es_sampler_create(40, &b, NULL, &sb));
    if (sa && sb) {
        CHECK(same_dist(sa, sb, l, hist, 100));
        CHECK(same_dist(sa, sb, l, NULL, 0));
    }
    es_sampler_free(sa);
    es_sampler_free(sb);

    /* repeat_last_n 0 is a window of 64: the same as 64, unlike 63 (token 39 sits only at
     * history[36], 64 from the end) and -1 (token 38 only at history[0]) */
    for (int i = 0; i < 100; i++) hist[i] = i % 30;
    hist[36] = 39;
    hist[0] = 38;
    es_sampler_params w[4];
    const int32_t last_n[4] = {0, 64, 63, -1};
    es_sampler *sw[4] = {NULL, NULL, NULL, NULL};
    for (int k = 0; k < 4; k++) {
        w[k] = a;
        w[k].repeat_penalty = 1.5f;
        w[k].repeat_last_n = last_n[k];
        CHECK_OK(es_sampler_create(40, &w[k], NULL, &sw[k]));
    }
    if (sw[0] && sw[1] && sw[2] && sw[3]) {
        CHECK(same_dist(sw[0], sw[1], l, hist, 100));
        /* weights relative to token 31, which the history never holds */
        es__dist d;
        double r39[4], r38[4];
        for (int k = 0; k < 4; k++) {
            CHECK_OK(es__sampler_dist(sw[k], l, hist, 100, &d));
            r39[k] = d.n == 40 ? d.w[39] / d.w[31] : -1.0;
            r38[k] = d.n == 40 ? d.w[38] / d.w[31] : -1.0;
        }
        /* the penalty takes l - l/1.5 = l/3 off a positive logit, l - 1.5 l = -l/2 off a negative one */
        const double f39 = exp(l[39] > 0 ? l[39] / 3.0 : -l[39] / 2.0), f38 = exp(l[38] > 0 ? l[38] / 3.0 : -l[38] / 2.0);
        CHECK(fabs(r39[2] / r39[0] / f39 - 1.0) < 1e-6); /* 39 penalised except with 63 */
        CHECK(fabs(r39[3] / r39[0] - 1.0) < 1e-12);
        CHECK(fabs(r38[2] / r38[0] - 1.0) < 1e-12); /* 38 penalised only by -1 */
        CHECK(fabs(r38[0] / r38[3] / f38 - 1.0) < 1e-6);
    }
    for (int k = 0; k < 4; k++) es_sampler_free(sw[k]);
}

static void test_invalid(void) {
    es_sampler *s = (es_sampler *)&s; /* poisoned: must be set to NULL on failure */
    es_sampler_params p;
    CHECK_FAILS(es_sampler_create(0, NULL, NULL, &s), ES_ERR_INVALID_ARGUMENT, "n_vocab 0");
    CHECK(s == NULL);
    CHECK_FAILS(es_sampler_create(4, NULL, NULL, NULL), ES_ERR_INVALID_ARGUMENT, "out is NULL");
    p = es_sampler_default_params();
    p.temperature = -0.5f;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "temperature");
    p.temperature = NAN;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "temperature");
    p = es_sampler_default_params();
    p.top_k = -1;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "top_k");
    p = es_sampler_default_params();
    p.top_p = -0.1f;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "top_p");
    p.top_p = NAN;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "top_p");
    p.top_p = 1.5f;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "top_p");
    p = es_sampler_default_params();
    p.min_p = -0.1f;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "min_p");
    p = es_sampler_default_params();
    p.repeat_penalty = -1.0f;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "repeat_penalty");
    p.repeat_penalty = NAN;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "repeat_penalty");
    p.repeat_penalty = INFINITY;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "repeat_penalty");
    p = es_sampler_default_params();
    p.repeat_last_n = -2;
    CHECK_FAILS(es_sampler_create(4, &p, NULL, &s), ES_ERR_INVALID_ARGUMENT, "repeat_last_n");
    CHECK(s == NULL);

    s = make(4, 1.0f, 0, 1.0f, 0.0f, 0);
    int32_t t = 99;
    float ok[4] = {0, 1, 2, 3}, nan_l[4] = {0, NAN, 2, 3}, pinf[4] = {0, 1, INFINITY, 3};
    float ninf[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK_FAILS(es_sample(s, nan_l, 0, NULL, 0, &t), ES_ERR_INVALID_ARGUMENT, "token 1");
    CHECK_FAILS(es_sample(s, pinf, 0, NULL, 0, &t), ES_ERR_INVALID_ARGUMENT, "token 2");
    CHECK_FAILS(es_sample(s, ninf, 0, NULL, 0, &t), ES_ERR_INVALID_ARGUMENT, "every logit is -inf");
    CHECK_FAILS(es_sample(s, ok, -1, NULL, 0, &t), ES_ERR_INVALID_ARGUMENT, "position -1");
    CHECK_FAILS(es_sample(s, NULL, 0, NULL, 0, &t), ES_ERR_INVALID_ARGUMENT, "logits");
    CHECK_FAILS(es_sample(s, ok, 0, NULL, 0, NULL), ES_ERR_INVALID_ARGUMENT, "token is NULL");
    CHECK_FAILS(es_sample(s, ok, 0, NULL, 3, &t), ES_ERR_INVALID_ARGUMENT, "history is NULL");
    int32_t bad_hist[2] = {1, 4};
    CHECK_FAILS(es_sample(s, ok, 0, bad_hist, 2, &t), ES_ERR_INVALID_ARGUMENT, "history[1] = 4");
    CHECK_FAILS(es_sample(NULL, ok, 0, NULL, 0, &t), ES_ERR_INVALID_ARGUMENT, "sampler is NULL");
    CHECK(t == 99); /* failed calls leave the output alone */
    /* and the sampler still works after failures */
    CHECK_OK(es_sample(s, ok, 0, NULL, 0, &t));
    CHECK(t >= 0 && t < 4);
    es_sampler_free(s);
    es_sampler_free(NULL);
}

/* Allocation failure injection: the k-th allocation fails. */
static void test_alloc_failure(void) {
    int failures = 0;
    for (int k = 0; k < 20; k++) {
        test_alloc f;
        es_allocator a = test_allocator(&f, k, true);
        es_sampler *s = NULL;
        es_status st = es_sampler_create(1000, NULL, &a, &s);
        if (st != ES_OK) {
            failures++;
            CHECK(st == ES_ERR_OUT_OF_MEMORY && s == NULL);
        }
        es_sampler_free(s);
        CHECKF(f.live == 0, "allocation %d failing leaks %ld blocks", k, f.live);
    }
    CHECK(failures > 0 && failures < 20);
}

int main(void) {
    test_greedy();
    test_uniform_stream();
    test_determinism();
    test_filters();
    test_frequencies();
    test_repetition_penalty();
    test_zero_params();
    test_invalid();
    test_alloc_failure();
    TEST_MAIN_END();
}
