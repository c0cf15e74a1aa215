/* push.h: push-constant blocks, one X-macro per kernel family, shared by the GLSL kernels and
 * the C host code so the two layouts cannot drift apart. Every member is a 32-bit scalar, so the
 * std430 push-constant layout and the C struct agree member for member; lib/vulkan/kernels.c
 * checks the sizes with _Static_assert and every pipeline's reflected block size at creation.
 * U(x) declares a uint, F(x) a float. Units: "texels" are 16-byte vec4/uvec4 elements. */
#ifndef ES_SHADERS_PUSH_H
#define ES_SHADERS_PUSH_H

/* mul_mat: Y[t][y_off + r] (=, +=, or SwiGLU of row pairs) = sum_k W[r][k] * X[t][k],
 * r < M, t < n. W row r starts at texel w_off + r * (K / elements-per-texel). */
#define ES_PC_MUL_MAT(U, F)                                                                        \
    U(M)        /* rows of W                                                 */                    \
    U(K)        /* elements per row, a multiple of 32                         */                   \
    U(n)        /* tokens                                                     */                   \
    U(x_off)    /* texel of token 0's row in X                                */                   \
    U(x_stride) /* texels between token rows of X                             */                   \
    U(y_off)    /* float offset of row 0 in token 0's row of Y               */                    \
    U(y_stride) /* floats between token rows of Y                             */                   \
    U(w_off)    /* texel of row 0 in the W view                               */                   \
    U(s_off)    /* element of row 0's first block scale in the S view         */

#endif
