/* spirv.c: a minimal SPIR-V reader that recovers a compute module's interface: its descriptor
 * bindings with their descriptor types, the size of its push-constant block, and its
 * specialisation ids. pipeline.c compares that with what the host binds, so a shader and the C
 * side that disagree fail at pipeline creation with a message instead of misbehaving.
 * It deliberately understands only what glslang emits for edgespec's kernels. */
#include "spirv.h"

#include <stdio.h>
#include <string.h>

enum {
    OP_TYPE_INT = 21, OP_TYPE_FLOAT = 22, OP_TYPE_VECTOR = 23, OP_TYPE_IMAGE = 25, OP_TYPE_SAMPLED_IMAGE = 27,
    OP_TYPE_STRUCT = 30, OP_TYPE_POINTER = 32, OP_VARIABLE = 59, OP_DECORATE = 71, OP_MEMBER_DECORATE = 72,
    DEC_SPEC_ID = 1, DEC_BLOCK = 2, DEC_BUFFER_BLOCK = 3, DEC_BINDING = 33, DEC_SET = 34, DEC_OFFSET = 35,
    SC_UNIFORM_CONSTANT = 0, SC_UNIFORM = 2, SC_PUSH_CONSTANT = 9, SC_STORAGE_BUFFER = 12, DIM_BUFFER = 5,
};

typedef struct id_info {
    uint16_t op;
    uint32_t a, b, c;     /* operands by op: pointer (storage class, pointee), image (dim, sampled), ... */
    int32_t binding, set;
    uint8_t block, buffer_block;
} id_info;

static int fail(char *msg, size_t cap, const char *what) {
    snprintf(msg, cap, "SPIR-V: %s", what);
    return -1;
}

/* Size in bytes of a scalar or vector type id; 0 if something else. */
static uint32_t type_size(const id_info *ids, uint32_t bound, uint32_t t) {
    if (t >= bound) return 0;
    const id_info *i = &ids[t];
    if (i->op == OP_TYPE_INT || i->op == OP_TYPE_FLOAT) return i->a / 8;
    if (i->op == OP_TYPE_VECTOR) return type_size(ids, bound, i->a) * i->b;
    return 0;
}

int es__spirv_reflect(const uint32_t *w, size_t n_words, const es_allocator *alloc, es__spirv_iface *out, char *msg,
                      size_t cap) {
    memset(out, 0, sizeof *out);
    if (n_words < 5 || w[0] != 0x07230203u) return fail(msg, cap, "bad magic or truncated header");
    const uint32_t bound = w[3];
    if (bound == 0 || bound > (1u << 22)) return fail(msg, cap, "implausible id bound");
    id_info *ids = es__calloc(alloc, bound, sizeof *ids);
    if (!ids) return fail(msg, cap, "out of memory") - 1; /* -2: the caller's ES_ERR_OUT_OF_MEMORY */
    for (uint32_t i = 0; i < bound; i++) ids[i].binding = ids[i].set = -1;
    /* push-constant member offsets: struct id -> max(offset + size) computed after the pass */
    uint32_t member_off[64][2]; /* (struct id, offset) pairs with their member index packed */
    uint32_t member_idx[64];
    uint32_t n_members = 0;
    int rc = 0;
    size_t pos = 5;
    while (pos < n_words) {
        uint32_t op = w[pos] & 0xffffu, wc = w[pos] >> 16;
        if (wc == 0 || pos + wc > n_words) {
            rc = fail(msg, cap, "instruction runs past the end");
            break;
        }
        const uint32_t *o = &w[pos + 1];
        switch (op) {
        case OP_TYPE_INT:
        case OP_TYPE_FLOAT:
            if (wc >= 3 && o[0] < bound) ids[o[0]] = (id_info){(uint16_t)op, o[1], 0, 0, -1, -1, 0, 0};
            break;
        case OP_TYPE_VECTOR:
            if (wc >= 4 && o[0] < bound) ids[o[0]] = (id_info){(uint16_t)op, o[1], o[2], 0, -1, -1, 0, 0};
            break;
        case OP_TYPE_IMAGE: /* result, sampled type, dim, depth, arrayed, ms, sampled, format */
            if (wc >= 9 && o[0] < bound) ids[o[0]] = (id_info){(uint16_t)op, o[2], o[6], 0, -1, -1, 0, 0};
            break;
        case OP_TYPE_SAMPLED_IMAGE:
            if (wc >= 3 && o[0] < bound) ids[o[0]] = (id_info){(uint16_t)op, o[1], 0, 0, -1, -1, 0, 0};
            break;
        case OP_TYPE_STRUCT:
            if (wc >= 2 && o[0] < bound) {
                ids[o[0]].op = (uint16_t)op;
                ids[o[0]].c = pos + 2 < n_words ? (uint32_t)(pos + 2) : 0; /* where the member types start */
                ids[o[0]].a = wc - 2;                                      /* member count */
            }
            break;
        case OP_TYPE_POINTER:
            if (wc >= 4 && o[0] < bound) ids[o[0]] = (id_info){(uint16_t)op, o[1], o[2], 0, -1, -1, 0, 0};
            break;
        case OP_VARIABLE: /* result type, result, storage class */
            if (wc >= 4 && o[1] < bound) {
                ids[o[1]].op = (uint16_t)op;
                ids[o[1]].a = o[0];
                ids[o[1]].b = o[2];
            }
            break;
        case OP_DECORATE:
            if (wc >= 3 && o[0] < bound) {
                if (o[1] == DEC_BINDING && wc >= 4) ids[o[0]].binding = (int32_t)o[2];
                if (o[1] == DEC_SET && wc >= 4) ids[o[0]].set = (int32_t)o[2];
                if (o[1] == DEC_BLOCK) ids[o[0]].block = 1;
                if (o[1] == DEC_BUFFER_BLOCK) ids[o[0]].buffer_block = 1;
                if (o[1] == DEC_SPEC_ID && wc >= 4 && o[2] < 32) out->spec_ids |= 1u << o[2];
            }
            break;
        case OP_MEMBER_DECORATE:
            if (wc >= 5 && o[2] == DEC_OFFSET && n_members < 64) {
                member_off[n_members][0] = o[0];
                member_off[n_members][1] = o[3];
                member_idx[n_members] = o[1];
                n_members++;
            }
            break;
        default: break;
        }
        pos += wc;
    }
    for (uint32_t v = 0; rc == 0 && v < bound; v++) {
        const id_info *var = &ids[v];
        if (var->op != OP_VARIABLE || var->a >= bound || ids[var->a].op != OP_TYPE_POINTER) continue;
        const uint32_t sc = var->b;
        uint32_t t = ids[var->a].b;
        if (t >= bound) continue;
        if (sc == SC_PUSH_CONSTANT) {
            if (ids[t].op != OP_TYPE_STRUCT) {
                rc = fail(msg, cap, "push-constant block is not a struct");
                break;
            }
            uint32_t end = 0;
            for (uint32_t m = 0; m < n_members; m++) {
                if (member_off[m][0] != t) continue;
                uint32_t idx = member_idx[m];
                if (idx >= ids[t].a || ids[t].c + idx >= n_words) continue;
                uint32_t sz = type_size(ids, bound, w[ids[t].c + idx]);
                if (sz == 0) {
                    rc = fail(msg, cap, "push-constant member is not a scalar or vector");
                    break;
                }
                if (member_off[m][1] + sz > end) end = member_off[m][1] + sz;
            }
            out->push_size = end;
            continue;
        }
        if (var->binding < 0) continue;
        if (out->n_bindings >= ES__SPIRV_MAX_BINDINGS) {
            rc = fail(msg, cap, "too many bindings");
            break;
        }
        es__spirv_binding *b = &out->bindings[out->n_bindings];
        b->set = (uint32_t)(var->set < 0 ? 0 : var->set);
        b->binding = (uint32_t)var->binding;
        if (sc == SC_STORAGE_BUFFER || (sc == SC_UNIFORM && ids[t].buffer_block)) {
            b->type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        } else if (sc == SC_UNIFORM && ids[t].block) {
            b->type = VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER;
        } else if (sc == SC_UNIFORM_CONSTANT && ids[t].op == OP_TYPE_SAMPLED_IMAGE && ids[t].a < bound &&
                   ids[ids[t].a].op == OP_TYPE_IMAGE && ids[ids[t].a].a == DIM_BUFFER) {
            b->type = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
        } else if (sc == SC_UNIFORM_CONSTANT && ids[t].op == OP_TYPE_IMAGE && ids[t].a == DIM_BUFFER && ids[t].b == 2) {
            b->type = VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER;
        } else {
            rc = fail(msg, cap, "a binding of a kind edgespec kernels do not use");
            break;
        }
        out->n_bindings++;
    }
    es__free(alloc, ids);
    return rc;
}
