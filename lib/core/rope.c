/* rope.c: RoPE's angles (rope.h). Pair i of a head at position p turns by
 *   θ_e = p base^(-2i / n_rot) / div_i     (the extrapolated angle; div_i = 1 without divisors)
 *   θ_i = s θ_e                             (interpolated; s = freq_scale)
 *   θ   = θ_i (1 − m_i) + θ_e m_i,  m_i = ext_factor · ramp(i)   (YaRN; m_i = 0 otherwise)
 * where ramp(i) is 1 up to pair corr_lo, 0 from corr_hi, linear between: the fast pairs keep
 * their trained angles, the slow ones are interpolated (YaRN's "NTK-by-parts"). cos and sin are
 * then multiplied by mscale. This is ggml's rope_yarn, written from the YaRN paper's and
 * Hugging Face's published definitions. */
#include "rope.h"

#include "model.h"

#include <math.h>

static const double PI = 3.14159265358979323846;

es__rope es__rope_plain(int32_t n_rot, float freq_base, float freq_scale) {
    es__rope r = {0};
    r.n_rot = n_rot;
    r.freq_base = freq_base;
    r.freq_scale = freq_scale;
    r.mscale = 1.0;
    return r;
}

/* The pair index whose wavelength fits n_rotations turns into n_ctx_orig positions. */
static double yarn_corr_dim(int32_t n_rot, int32_t n_ctx_orig, double n_rotations, double base) {
    return n_rot * log((double)n_ctx_orig / (n_rotations * 2.0 * PI)) / (2.0 * log(base));
}

es__rope es__rope_for(const es__hparams *hp, int32_t n_ctx) {
    es__rope r = es__rope_plain(hp->n_rot, hp->rope_freq_base, hp->rope_freq_scale);
    r.freq_div = hp->rope_freqs;
    if (hp->rope_long && hp->rope_short) r.freq_div = n_ctx > hp->rope_n_ctx_orig ? hp->rope_long : hp->rope_short;
    r.mscale = hp->rope_attn_factor > 0.0f ? hp->rope_attn_factor : 1.0;
    if (hp->rope_scaling == ES__ROPE_SCALING_YARN) {
        r.ext_factor = hp->yarn_ext_factor;
        r.corr_lo = fmax(0.0, floor(yarn_corr_dim(hp->n_rot, hp->rope_n_ctx_orig, hp->yarn_beta_fast, r.freq_base)));
        r.corr_hi = fmin(hp->n_rot - 1.0,
                         ceil(yarn_corr_dim(hp->n_rot, hp->rope_n_ctx_orig, hp->yarn_beta_slow, r.freq_base)));
        /* YaRN's attention temperature: sqrt(1/t) = 1 + 0.1 ln(factor) on q and k alike */
        const double factor = 1.0 / r.freq_scale;
        if (r.ext_factor != 0.0 && factor > 1.0) r.mscale *= 1.0 + 0.1 * log(factor);
    }
    return r;
}

/* Which tables a model has: bit 0 the model's, bit 1 the sliding layers' own, bit 2 the identity. */
static unsigned table_set(const es__hparams *hp) {
    return 1u | (hp->rope_freq_base_swa > 0.0f ? 2u : 0u) | (hp->arch && hp->arch->nope_step > 0 ? 4u : 0u);
}

/* The number of table kind k (a bit of table_set) among the model's tables. */
static int32_t table_index(const es__hparams *hp, unsigned k) {
    int32_t n = 0;
    for (unsigned b = 1u; b < k; b <<= 1) n += (table_set(hp) & b) != 0;
    return n;
}

int32_t es__rope_tables(const es__hparams *hp) {
    return table_index(hp, 8u);
}

int32_t es__rope_table_of(const es__hparams *hp, int32_t il) {
    const int32_t step = hp->arch ? hp->arch->nope_step : 0;
    if (step > 0 && (il + 1) % step == 0) return table_index(hp, 4u);
    return es__layer_rope_local(hp, il) ? table_index(hp, 2u) : 0;
}

es__rope es__rope_table(const es__hparams *hp, int32_t n_ctx, int32_t t) {
    for (unsigned k = 2u; k <= 4u; k <<= 1) {
        if (!(table_set(hp) & k) || table_index(hp, k) != t) continue;
        es__rope r = es__rope_plain(hp->n_rot, k == 2u ? hp->rope_freq_base_swa : 10000.0f, 1.0f);
        r.identity = k == 4u;
        return r;
    }
    return es__rope_for(hp, n_ctx);
}

void es__rope_cs(const es__rope *r, int64_t pos, int64_t i0, int64_t i1, bool unit, float *cs) {
    const double mag = unit ? 1.0 : r->mscale;
    for (int64_t i = i0; i < i1 && r->identity; i++) {
        cs[2 * (i - i0)] = 1.0f;
        cs[2 * (i - i0) + 1] = 0.0f;
    }
    for (int64_t i = i0; i < i1 && !r->identity; i++) {
        const double w = pow(r->freq_base, -2.0 * (double)i / (double)r->n_rot);
        const double div = r->freq_div ? (double)r->freq_div[i] : 1.0;
        double theta = (double)pos * r->freq_scale * w / div;
        if (r->ext_factor != 0.0) {
            const double theta_e = (double)pos * w / div;
            const double y = ((double)i - r->corr_lo) / fmax(0.001, r->corr_hi - r->corr_lo);
            const double mix = (1.0 - fmin(1.0, fmax(0.0, y))) * r->ext_factor;
            theta = theta * (1.0 - mix) + theta_e * mix;
        }
        cs[(i - i0) * 2 + 0] = (float)(cos(theta) * mag);
        cs[(i - i0) * 2 + 1] = (float)(sin(theta) * mag);
    }
}
