// reduce.glsl: whole-workgroup reductions in a fixed order: within subgroups by subgroup
// arithmetic (ES_SUBGROUP=1) and then across subgroups in subgroup order, or entirely through
// shared memory in invocation order (ES_SUBGROUP=0). Every invocation gets the result; all must
// call in uniform control flow.
#if ES_SUBGROUP
shared float wg_red[64]; // one slot per subgroup (workgroups have at most 64 subgroups)
#else
shared float wg_red[gl_WorkGroupSize.x];
#endif

float wg_sum(float v) {
#if ES_SUBGROUP
    v = subgroupAdd(v);
    if (subgroupElect()) wg_red[gl_SubgroupID] = v;
    barrier();
    float s = wg_red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) s += wg_red[i];
#else
    wg_red[gl_LocalInvocationID.x] = v;
    barrier();
    float s = wg_red[0];
    for (uint i = 1u; i < gl_WorkGroupSize.x; i++) s += wg_red[i];
#endif
    barrier();
    return s;
}

float wg_max(float v) {
#if ES_SUBGROUP
    v = subgroupMax(v);
    if (subgroupElect()) wg_red[gl_SubgroupID] = v;
    barrier();
    float s = wg_red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) s = max(s, wg_red[i]);
#else
    wg_red[gl_LocalInvocationID.x] = v;
    barrier();
    float s = wg_red[0];
    for (uint i = 1u; i < gl_WorkGroupSize.x; i++) s = max(s, wg_red[i]);
#endif
    barrier();
    return s;
}
