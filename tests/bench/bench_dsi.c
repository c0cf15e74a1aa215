/* bench_dsi.c: DSI, SI and non-SI on the latency-controlled harness (tests/multi/dsi_synth.h):
 * the same scheduler as ES_SPEC_DSI (lib/multi/dsi_sched.c), synthetic forwards that sleep the
 * given latencies and answer from an oracle with the given acceptance rate. One configuration
 * per call, one JSON object per line on stdout (the scripts tests/bench/dsi_table1.py and
 * dsi_heatmap.py drive it):
 *   bench_dsi TARGET_MS DRAFT_MS ACCEPT N_TOKENS REPEATS DSI_CONFIGS SI_LOOKAHEADS [SEED]
 * DSI_CONFIGS "LOOKAHEAD:SERVERS,..." and SI_LOOKAHEADS "K,..." are grids; each algorithm runs
 * REPEATS times with seeds SEED, SEED + 1, ... (the same acceptances for every algorithm in a
 * repeat; the algorithms take turns within a repeat, so a noisy moment hits all of them). Prints,
 * per repeat, each run's wall time, and a summary with each algorithm's median over the repeats
 * and its best grid point, and Algorithm 1's time with unlimited servers and no overheads on
 * the same acceptances (Proposition 1's accounting: t_draft per accepted draft, t_target per
 * token the target decides, and the last token's verification), the floor for any DSI. The first call of every worker (its prompt) is excluded from the time,
 * for every algorithm. */
#include "../multi/dsi_synth.h"

#include <stdio.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define MAX_GRID 32
#define MAX_REPEATS 64

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    double t[MAX_REPEATS];
    memcpy(t, v, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static int parse_list(const char *s, int32_t *a, int32_t *b, int max) {
    int n = 0;
    while (s && *s && n < max) {
        char *end = NULL;
        a[n] = (int32_t)strtol(s, &end, 10);
        b[n] = 0;
        if (*end == ':') b[n] = (int32_t)strtol(end + 1, &end, 10);
        n++;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
    }
    return n;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s TARGET_MS DRAFT_MS ACCEPT N_TOKENS REPEATS LOOKAHEAD:SERVERS,... SI_K,... [SEED]\n",
                argv[0]);
        return 2;
    }
#ifdef __linux__
    /* sleep as asked: 1 ns of timer slack instead of 50 us, inherited by the workers */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
    synth_cfg c;
    memset(&c, 0, sizeof c);
    c.t_target = c.t_target_first = atof(argv[1]);
    c.t_draft = c.t_draft_first = atof(argv[2]);
    c.accept = atof(argv[3]);
    c.n_vocab = 1000;
    const int32_t n = atoi(argv[4]), repeats = atoi(argv[5]);
    if (repeats < 1 || repeats > MAX_REPEATS) {
        fprintf(stderr, "REPEATS: 1..%d\n", MAX_REPEATS);
        return 2;
    }
    int32_t dk[MAX_GRID], ds[MAX_GRID], sk[MAX_GRID], unused[MAX_GRID];
    const int n_dsi = parse_list(argv[6], dk, ds, MAX_GRID), n_si = parse_list(argv[7], sk, unused, MAX_GRID);
    const uint64_t seed0 = argc > 8 ? strtoull(argv[8], NULL, 10) : 1;
    const int32_t n_prompt = 16, n_ctx = n_prompt + n + 64;
    static double dsi_t[MAX_GRID][MAX_REPEATS], si_t[MAX_GRID][MAX_REPEATS], nonsi_t[MAX_REPEATS], ideal_t[MAX_REPEATS];
    double dsi_med[MAX_GRID], si_med[MAX_GRID];
    int64_t jobs[MAX_GRID] = {0}, preempted[MAX_GRID] = {0};
    bool all_exact = true;
    for (int r = 0; r < repeats; r++) {
        c.seed = seed0 + (uint64_t)r;
        ideal_t[r] = c.t_target;
        for (int32_t i = n_prompt; i < n_prompt + n - 1; i++)
            ideal_t[r] += synth_guess(&c, i) == synth_truth(&c, i) ? c.t_draft : c.t_target;
        synth s;
        synth_init(&s, &c, n_ctx, 1, 1);
        const double nonsi = synth_nonsi_ms(&s, n_prompt, n);
        synth_free(&s);
        nonsi_t[r] = nonsi;
        printf("{\"repeat\": %d, \"algo\": \"nonsi\", \"ms\": %.3f}\n", r, nonsi);
        for (int i = 0; i < n_si; i++) {
            synth_init(&s, &c, n_ctx, 1, 1);
            int64_t calls = 0;
            const double ms = synth_si_ms(&s, n_prompt, n, sk[i], &calls);
            synth_free(&s);
            si_t[i][r] = ms;
            printf("{\"repeat\": %d, \"algo\": \"si\", \"lookahead\": %d, \"ms\": %.3f, \"target_calls\": %lld}\n", r, sk[i],
                   ms, (long long)calls);
        }
        for (int i = 0; i < n_dsi; i++) {
            synth_init(&s, &c, n_ctx, ds[i], dk[i]);
            es_dsi_stats st;
            memset(&st, 0, sizeof st);
            bool exact = false;
            const double ms = synth_dsi_ms(&s, ds[i], n_prompt, n, &st, &exact);
            synth_free(&s);
            all_exact = all_exact && exact;
            dsi_t[i][r] = ms;
            jobs[i] += st.n_jobs;
            preempted[i] += st.n_jobs_preempted;
            printf("{\"repeat\": %d, \"algo\": \"dsi\", \"lookahead\": %d, \"servers\": %d, \"ms\": %.3f, \"jobs\": %lld, "
                   "\"preempted\": %lld, \"exact\": %s}\n",
                   r, dk[i], ds[i], ms, (long long)st.n_jobs, (long long)st.n_jobs_preempted, exact ? "true" : "false");
        }
        fflush(stdout);
    }
    int best_dsi = 0, best_si = 0;
    for (int i = 0; i < n_dsi; i++) dsi_med[i] = median(dsi_t[i], repeats);
    for (int i = 0; i < n_si; i++) si_med[i] = median(si_t[i], repeats);
    for (int i = 1; i < n_dsi; i++)
        if (dsi_med[i] < dsi_med[best_dsi]) best_dsi = i;
    for (int i = 1; i < n_si; i++)
        if (si_med[i] < si_med[best_si]) best_si = i;
    printf("{\"summary\": true, \"target_ms\": %g, \"draft_ms\": %g, \"accept\": %g, \"tokens\": %d, \"repeats\": %d, "
           "\"nonsi_ms\": %.3f, \"si_ms\": %.3f, \"si_lookahead\": %d, \"dsi_ms\": %.3f, \"dsi_lookahead\": %d, "
           "\"dsi_servers\": %d, \"dsi_jobs\": %.1f, \"dsi_preempted\": %.1f, \"exact\": %s, \"ideal_dsi_ms\": %.3f, "
           "\"dsi_grid\": [",
           c.t_target, c.t_draft, c.accept, n, repeats, median(nonsi_t, repeats), n_si ? si_med[best_si] : 0.0,
           n_si ? sk[best_si] : 0, dsi_med[best_dsi], dk[best_dsi], ds[best_dsi],
           (double)jobs[best_dsi] / repeats, (double)preempted[best_dsi] / repeats, all_exact ? "true" : "false",
           median(ideal_t, repeats));
    for (int i = 0; i < n_dsi; i++)
        printf("%s{\"lookahead\": %d, \"servers\": %d, \"ms\": %.3f}", i ? ", " : "", dk[i], ds[i], dsi_med[i]);
    printf("], \"si_grid\": [");
    for (int i = 0; i < n_si; i++) printf("%s{\"lookahead\": %d, \"ms\": %.3f}", i ? ", " : "", sk[i], si_med[i]);
    printf("]}\n");
    return all_exact ? 0 : 1;
}
