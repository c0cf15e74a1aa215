/* sampler.c: es_sampler: greedy and filtered random sampling from one position's logits.
 *
 * The chain (also documented at es_sample in edgespec.h) is fixed: repetition penalty, then
 * greedy when temperature == 0, else temperature, top-k, top-p, min-p, and one draw from the
 * position-keyed uniform stream. Every step breaks ties by the lower token id, so the result is a
 * pure function of (params, logits, history, pos): speculative strategies that evaluate the same
 * position with bit-identical logits pick the same token as plain decoding.
 * Deliberately not here: grammar constraints, logit biases, stop strings, any state carried from
 * one call to the next (there is no RNG state to advance).
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Weight buckets for top-p: the exponent and 6 mantissa bits of a weight in [2^-126, 1] order
 * the weights in steps of 1.1% without sorting them. */
#define ES__TOPP_KEY_LO (897u << 6) /* key of 2^-126: exponent 1023 - 126 */
#define ES__TOPP_BUCKETS ((1023u << 6) - ES__TOPP_KEY_LO + 1)

struct es_sampler {
    es_sampler_params p;
    int32_t n_vocab;
    es_allocator alloc_copy;
    const es_allocator *alloc;
    es__err err;
    float *work;      /* [n_vocab] logits after the penalty                         */
    double *bucket_mass; /* [ES__TOPP_BUCKETS] top-p mass per weight bucket          */
    int32_t *ids;     /* [n_vocab] candidate ids, ascending                          */
    double *w;        /* [n_vocab] candidate weights, parallel to ids               */
    int32_t *heap;    /* [n_vocab] top-k selection heap                             */
    struct es__cand *sorted; /* [n_vocab] top-p ordering scratch                    */
    uint32_t *stamp;  /* [n_vocab] marks tokens already penalised in this call      */
    uint32_t stamp_gen;
};

typedef struct es__cand {
    double w;
    int32_t id;
} es__cand;

/* The penalty's window when repeat_last_n is 0: llama.cpp's default, so a penalty set alone
 * behaves as there. */
#define ES__REPEAT_LAST_N_DEFAULT 64

es_sampler_params es_sampler_default_params(void) {
    es_sampler_params p;
    memset(&p, 0, sizeof p);
    return p;
}

es_status es__sampler_params_check(const es_sampler_params *p, es__err *err) {
    ES_TRY(ES__CHECK_RESERVED(p, "es_sampler_params", err));
    /* written so that NaN fails every range test */
    ES_RETURN_IF(!(p->temperature >= 0.0f) || isinf(p->temperature), err, ES_ERR_INVALID_ARGUMENT,
                 "sampler: temperature %g must be finite and >= 0", (double)p->temperature);
    ES_RETURN_IF(p->top_k < 0, err, ES_ERR_INVALID_ARGUMENT, "sampler: top_k %d must be >= 0 (0 = off)", p->top_k);
    ES_RETURN_IF(!(p->top_p >= 0.0f && p->top_p <= 1.0f), err, ES_ERR_INVALID_ARGUMENT,
                 "sampler: top_p %g must be in [0, 1] (0 and 1 = off)", (double)p->top_p);
    ES_RETURN_IF(!(p->min_p >= 0.0f && p->min_p <= 1.0f), err, ES_ERR_INVALID_ARGUMENT,
                 "sampler: min_p %g must be in [0, 1] (0 = off)", (double)p->min_p);
    ES_RETURN_IF(!(p->repeat_penalty >= 0.0f) || isinf(p->repeat_penalty), err, ES_ERR_INVALID_ARGUMENT,
                 "sampler: repeat_penalty %g must be finite and >= 0 (0 and 1 = off)", (double)p->repeat_penalty);
    ES_RETURN_IF(p->repeat_last_n < -1, err, ES_ERR_INVALID_ARGUMENT,
                 "sampler: repeat_last_n %d must be >= -1 (0 = %d, -1 = whole history)", p->repeat_last_n,
                 ES__REPEAT_LAST_N_DEFAULT);
    return ES_OK;
}

/* The one place the zeros of es_sampler_params get their meaning (NULL is all zeros), after
 * es__sampler_params_check: "off" becomes the neutral value the chain tests for. */
static es_sampler_params resolve_params(const es_sampler_params *params) {
    es_sampler_params p = params ? *params : es_sampler_default_params();
    if (p.top_p == 0.0f) p.top_p = 1.0f;
    if (p.repeat_penalty == 0.0f) p.repeat_penalty = 1.0f;
    if (p.repeat_last_n == 0) p.repeat_last_n = ES__REPEAT_LAST_N_DEFAULT;
    return p;
}

void es_sampler_free(es_sampler *s) {
    if (!s) return;
    es_allocator copy;
    const es_allocator *a = NULL;
    if (s->alloc) {
        copy = *s->alloc;
        a = &copy;
    }
    es__free(a, s->work);
    es__free(a, s->bucket_mass);
    es__free(a, s->ids);
    es__free(a, s->w);
    es__free(a, s->heap);
    es__free(a, s->sorted);
    es__free(a, s->stamp);
    es__free(a, s);
}

es_status es_sampler_create(int32_t n_vocab, const es_sampler_params *params, const es_allocator *allocator,
                            es_sampler **out) {
    if (!out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_sampler_create: out is NULL");
    *out = NULL;
    if (n_vocab <= 0)
        return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_sampler_create: n_vocab %d must be > 0", n_vocab);
    if (params) ES_TRY(es__sampler_params_check(params, NULL));
    const es_sampler_params p = resolve_params(params);
    es_sampler *s = es__calloc(allocator, 1, sizeof *s);
    if (!s) return es__fail(NULL, ES_ERR_OUT_OF_MEMORY, "es_sampler_create: out of memory");
    if (allocator) {
        s->alloc_copy = *allocator;
        s->alloc = &s->alloc_copy;
    }
    s->p = p;
    s->n_vocab = n_vocab;
    const size_t n = (size_t)n_vocab;
    s->work = es__calloc(s->alloc, n, sizeof *s->work);
    s->bucket_mass = es__calloc(s->alloc, ES__TOPP_BUCKETS, sizeof *s->bucket_mass);
    s->ids = es__calloc(s->alloc, n, sizeof *s->ids);
    s->w = es__calloc(s->alloc, n, sizeof *s->w);
    s->heap = es__calloc(s->alloc, n, sizeof *s->heap);
    s->sorted = es__calloc(s->alloc, n, sizeof *s->sorted);
    s->stamp = es__calloc(s->alloc, n, sizeof *s->stamp);
    if (!s->work || !s->bucket_mass || !s->ids || !s->w || !s->heap || !s->sorted || !s->stamp) {
        es_sampler_free(s);
        return es__fail(NULL, ES_ERR_OUT_OF_MEMORY, "es_sampler_create: out of memory for %d-token scratch",
                        n_vocab);
    }
    *out = s;
    return ES_OK;
}

/* ---- the position-keyed random stream */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser: a bijection with full avalanche */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double es_sampler_uniform(uint64_t seed, int64_t pos) {
    /* Counter-based: hash (key, counter) instead of advancing a state, so any position can be
     * drawn in any order. The key and the counter are mixed separately before combining so that
     * neighbouring seeds and neighbouring positions give unrelated streams. */
    const uint64_t key = mix64(seed + 0x9E3779B97F4A7C15ull);
    const uint64_t h = mix64(key ^ mix64((uint64_t)pos + 0x632BE59BD9B4E019ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0); /* 53 bits: [0, 1) */
}

/* ---- the filter chain */

/* Checks logits in one branch-free pass over their bits (integer compares vectorise where a float
 * max reduction does not): NaN and +inf are rejected, the maximum is returned. The search for the
 * offending index runs only on failure. */
static es_status scan_logits(es_sampler *s, const float *logits, float *max_out) {
    const int32_t n = s->n_vocab;
    int32_t kmax = INT32_MIN;
    uint32_t bad = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &logits[i], sizeof b);
        bad |= ((b & 0x7FFFFFFFu) > 0x7F800000u) | (b == 0x7F800000u); /* NaN, +inf */
        /* order-preserving map of a float's bits to a signed integer */
        const int32_t k = (int32_t)(b ^ ((uint32_t)((int32_t)b >> 31) & 0x7FFFFFFFu));
        kmax = k > kmax ? k : kmax;
    }
    if (ES__UNLIKELY(bad)) {
        for (int32_t i = 0; i < n; i++)
            ES_RETURN_IF(isnan(logits[i]) || logits[i] == INFINITY, &s->err, ES_ERR_INVALID_ARGUMENT,
                         "es_sample: logit of token %d is %g (NaN and +inf are not logits)", i, (double)logits[i]);
    }
    const uint32_t mb = (uint32_t)kmax ^ ((uint32_t)(kmax >> 31) & 0x7FFFFFFFu);
    float mx;
    memcpy(&mx, &mb, sizeof mx);
    ES_RETURN_IF(mx == -INFINITY, &s->err, ES_ERR_INVALID_ARGUMENT, "es_sample: every logit is -inf");
    *max_out = mx;
    return ES_OK;
}

/* The repetition penalty, llama.cpp's rule: each distinct token among the last repeat_last_n
 * history tokens once; positive logits divided, others multiplied. Works on a copy of the logits;
 * returns the array the rest of the chain reads (the caller's own when nothing is penalised). */
static const float *apply_penalty(es_sampler *s, const float *logits, const int32_t *history, size_t n_history) {
    const es_sampler_params *p = &s->p;
    if (p->repeat_penalty == 1.0f || n_history == 0) return logits;
    const size_t window = p->repeat_last_n < 0 ? n_history : ES__MIN(n_history, (size_t)p->repeat_last_n);
    memcpy(s->work, logits, sizeof *s->work * (size_t)s->n_vocab);
    if (++s->stamp_gen == 0) { /* wrapped: clear so old marks cannot alias */
        memset(s->stamp, 0, sizeof *s->stamp * (size_t)s->n_vocab);
        s->stamp_gen = 1;
    }
    for (size_t i = n_history - window; i < n_history; i++) {
        const int32_t t = history[i];
        if (s->stamp[t] == s->stamp_gen) continue;
        s->stamp[t] = s->stamp_gen;
        const float l = s->work[t];
        s->work[t] = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
    }
    return s->work;
}

/* a ranks below b: lower logit, or equal logit and higher id */
static inline bool ranks_below(const float *l, int32_t a, int32_t b) {
    return l[a] < l[b] || (l[a] == l[b] && a > b);
}

static void heap_sift_down(int32_t *h, int32_t n, int32_t i, const float *l) {
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && ranks_below(l, h[c + 1], h[c])) c++;
        if (!ranks_below(l, h[c], h[i])) return;
        int32_t t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Fills s->ids with the k best tokens (ids ascending); min-heap with the worst kept at the root,
 * so most tokens cost one comparison. */
static int32_t select_top_k(es_sampler *s, const float *l, int32_t k) {
    int32_t *h = s->heap, m = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (l[i] == -INFINITY) continue;
        if (m < k) {
            h[m++] = i;
            if (m == k)
                for (int32_t j = k / 2 - 1; j >= 0; j--) heap_sift_down(h, k, j, l);
        } else if (ranks_below(l, h[0], i)) {
            h[0] = i;
            heap_sift_down(h, k, 0, l);
        }
    }
    memcpy(s->ids, h, sizeof *h * (size_t)m);
    qsort(s->ids, (size_t)m, sizeof *s->ids, cmp_i32);
    return m;
}

/* exp(x) for x <= 0, written so the compiler vectorises the loops that call it: x = k ln2 + r
 * with |r| <= ln2/2 (reduced in double, so large |x| keeps its accuracy), a degree-7 Taylor
 * polynomial for e^r (relative error below 1e-8), and 2^k from the exponent bits. Below -87
 * (e^-87 ~ 2^-126) it returns 0: such a token is e^87 times less likely than the best one. */
static inline double exp_neg(double x) {
    const double xc = x < -87.0 ? -87.0 : x;
    const int64_t k = (int64_t)(xc * 1.4426950408889634 - 0.5); /* round to nearest for xc <= 0 */
    const double kd = (double)k;
    const double r = xc - kd * 0.6931471805599453;
    double q = 1.0 / 5040.0;
    q = q * r + 1.0 / 720.0;
    q = q * r + 1.0 / 120.0;
    q = q * r + 1.0 / 24.0;
    q = q * r + 1.0 / 6.0;
    q = q * r + 0.5;
    q = q * r + 1.0;
    q = q * r + 1.0;
    const uint64_t bits = (uint64_t)(k + 1023) << 52;
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < -87.0 ? 0.0 : q * scale;
}

/* Weights relative to the best token for the candidates in s->ids[0..n), or for every token when
 * dense (ids = 0..n_vocab-1, -inf tokens get weight 0). Returns the total. */
static double weigh(es_sampler *s, const float *l, float lmax, int32_t n, bool dense) {
    const double inv_t = 1.0 / (double)s->p.temperature, m = (double)lmax;
    double *w = s->w;
    if (dense) {
        for (int32_t i = 0; i < n; i++) w[i] = exp_neg(((double)l[i] - m) * inv_t);
        for (int32_t i = 0; i < n; i++) s->ids[i] = i;
    } else {
        for (int32_t i = 0; i < n; i++) w[i] = exp_neg(((double)l[s->ids[i]] - m) * inv_t);
    }
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += w[i];
    return total;
}

static int cmp_cand_desc(const void *a, const void *b) {
    const es__cand *x = a, *y = b;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static inline uint32_t weight_bucket(double w) {
    uint64_t bits;
    memcpy(&bits, &w, sizeof bits);
    const uint32_t key = (uint32_t)(bits >> 46);
    return key > ES__TOPP_KEY_LO ? key - ES__TOPP_KEY_LO : 0; /* exp_neg never goes below 2^-126 */
}

/* Top-p (Holtzman et al., nucleus sampling): keep the smallest set of most likely candidates, in
 * (weight desc, id asc) order, whose mass reaches top_p. Bucketing finds the bucket where the mass
 * is reached; only that bucket's candidates are sorted. Weights are 0 or >= 2^-126 (exp_neg). */
static int32_t filter_top_p(es_sampler *s, int32_t n, double total, double top_p) {
    const double need = top_p * total;
    double *mass = s->bucket_mass;
    memset(mass, 0, sizeof *mass * ES__TOPP_BUCKETS);
    for (int32_t i = 0; i < n; i++)
        if (s->w[i] > 0.0) mass[weight_bucket(s->w[i])] += s->w[i];
    double above = 0.0; /* mass of the buckets above the boundary */
    uint32_t b = ES__TOPP_BUCKETS - 1;
    for (;; b--) {
        if (above + mass[b] >= need || b == 0) break;
        above += mass[b];
    }
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (s->w[i] > 0.0 && weight_bucket(s->w[i]) == b) s->sorted[m++] = (es__cand){s->w[i], s->ids[i]};
    qsort(s->sorted, (size_t)m, sizeof *s->sorted, cmp_cand_desc);
    es__cand cut = m > 0 ? s->sorted[m - 1] : (es__cand){0.0, INT32_MAX};
    double cum = above;
    for (int32_t i = 0; i < m; i++) {
        cum += s->sorted[i].w;
        if (cum >= need) {
            cut = s->sorted[i];
            break;
        }
    }
    int32_t kept = 0;
    for (int32_t i = 0; i < n; i++) {
        const double w = s->w[i];
        if (w <= 0.0) continue;
        const uint32_t k = weight_bucket(w);
        if (k > b || (k == b && (w > cut.w || (w == cut.w && s->ids[i] <= cut.id)))) {
            s->ids[kept] = s->ids[i];
            s->w[kept] = w;
            kept++;
        }
    }
    return kept;
}

es_status es__sampler_dist(es_sampler *s, const float *logits, const int32_t *history, size_t n_history,
                           es__dist *out) {
    ES_RETURN_IF(!logits || !out, &s->err, ES_ERR_INVALID_ARGUMENT, "es_sample: logits or out is NULL");
    ES_RETURN_IF(n_history > 0 && !history, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_sample: history is NULL but n_history is %zu", n_history);
    for (size_t i = 0; i < n_history; i++)
        ES_RETURN_IF(history[i] < 0 || history[i] >= s->n_vocab, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_sample: history[%zu] = %d outside [0, %d)", i, history[i], s->n_vocab);
    float lmax = 0.0f;
    ES_TRY(scan_logits(s, logits, &lmax));
    const es_sampler_params *p = &s->p;
    const float *l = apply_penalty(s, logits, history, n_history);
    if (l != logits) { /* the penalty moved logits: find the new maximum */
        lmax = -INFINITY;
        for (int32_t i = 0; i < s->n_vocab; i++) lmax = l[i] > lmax ? l[i] : lmax;
    }

    if (p->temperature == 0.0f || p->top_k == 1) {
        int32_t best = 0;
        while (l[best] != lmax) best++; /* the first maximum: ties to the lowest id */
        s->ids[0] = best;
        s->w[0] = 1.0;
        *out = (es__dist){1, s->ids, s->w, 1.0};
        return ES_OK;
    }

    /* temperature, then softmax weights relative to the best token (whose weight is exactly 1) */
    int32_t n;
    double total;
    if (p->top_k > 0 && p->top_k < s->n_vocab) {
        n = select_top_k(s, l, p->top_k);
        total = weigh(s, l, lmax, n, false);
    } else {
        n = s->n_vocab;
        total = weigh(s, l, lmax, n, true);
    }
    if (p->top_p < 1.0f) n = filter_top_p(s, n, total, (double)p->top_p);
    /* Min-p (Nguyen et al., "min-p sampling"): relative to the most likely token, whose weight is
     * 1. The same pass drops zero weights, so every candidate left can be drawn. */
    const double floor_w = (double)p->min_p;
    int32_t kept = 0;
    total = 0.0;
    for (int32_t i = 0; i < n; i++) {
        if (s->w[i] < floor_w || s->w[i] == 0.0) continue;
        s->ids[kept] = s->ids[i];
        s->w[kept] = s->w[i];
        total += s->w[i];
        kept++;
    }
    n = kept;
    ES_ASSERT(n >= 1 && total >= 1.0);
    *out = (es__dist){n, s->ids, s->w, total};
    return ES_OK;
}

int32_t es__dist_draw(const es__dist *d, double u) {
    const double target = u * d->total;
    double cum = 0.0;
    for (int32_t i = 0; i < d->n; i++) {
        cum += d->w[i];
        if (target < cum) return d->ids[i];
    }
    /* rounding left target at or above the sum: the last candidate with positive weight */
    for (int32_t i = d->n - 1; i > 0; i--)
        if (d->w[i] > 0.0) return d->ids[i];
    return d->ids[0];
}

es_status es_sample(es_sampler *s, const float *logits, int64_t pos, const int32_t *history, size_t n_history,
                    int32_t *token) {
    if (!s) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_sample: sampler is NULL");
    ES_RETURN_IF(!token, &s->err, ES_ERR_INVALID_ARGUMENT, "es_sample: token is NULL");
    ES_RETURN_IF(pos < 0, &s->err, ES_ERR_INVALID_ARGUMENT, "es_sample: position %lld < 0", (long long)pos);
    es__dist d;
    ES_TRY(es__sampler_dist(s, logits, history, n_history, &d));
    *token = d.n == 1 ? d.ids[0] : es__dist_draw(&d, es_sampler_uniform(s->p.seed, pos));
    return ES_OK;
}
