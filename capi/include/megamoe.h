/* megamoe's C ABI: the single-GPU MoE layer (bf16 or blockwise FP8, forward and backward). Library: libmegamoe_capi.so
 * (`cargo build --release -p megamoe-capi`). The conventions (status codes, device buffers checked before any
 * launch, ordering with the caller's stream, saved states) are in capi/src/lib.rs's module documentation;
 * python/megamoe_torch.py is a complete caller. Device buffers are passed as 64-bit device addresses, the
 * caller's stream as its CUstream / cudaStream_t value (0: the legacy default stream). */
#ifndef MEGAMOE_H
#define MEGAMOE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    MEGAMOE_OK = 0,
    MEGAMOE_INVALID_ARGUMENT = 1, /* refused before any launch, nothing changed; or invalid expert ids (check) */
    MEGAMOE_NO_DRIVER = 2,
    MEGAMOE_NO_DEVICE = 3,
    MEGAMOE_UNSUPPORTED_DEVICE = 4, /* not Hopper (sm_90a) */
    MEGAMOE_CUDA_ERROR = 5,
    MEGAMOE_TIMEOUT = 6, /* a bounded device wait expired (megamoe_saved_check) */
    MEGAMOE_INTERNAL = 7
};

typedef struct MegamoeLayer MegamoeLayer;
typedef struct MegamoeSaved MegamoeSaved;

/* A layer for hidden size H, expert intermediate size I, E experts, top-k slots a token, calls of up to
 * max_tokens tokens; save_z != 0 keeps z for the backward (else it is recomputed). Its workspace is scratch: one
 * layer serves every MoE layer of a model that has this configuration (the weights are arguments; each forward's
 * saved state holds what its backward needs), their calls in any order, one at a time (a ring of saved states,
 * megamoe_layer_reserve_saved, is theirs together: a slot for every forward awaiting its backward). */
int megamoe_layer_new(int device, size_t hidden, size_t intermediate, size_t experts, size_t top_k,
                      size_t max_tokens, int save_z, MegamoeLayer **out);
void megamoe_layer_free(MegamoeLayer *layer);

/* A ring of `slots` saved states (each for max_tokens) that the forwards then write in turn instead of allocating
 * one each (0: back to allocating): with it a forward and backward can be captured in a CUDA graph. A captured
 * forward keeps its slot for good (its graph's replays rewrite it): reserve one slot per forward to capture plus
 * one per eager forward waiting for its backward. A backward given a handle whose slot a later forward overwrote
 * is refused (MEGAMOE_INVALID_ARGUMENT). Not during a capture. */
int megamoe_layer_reserve_saved(const MegamoeLayer *layer, size_t slots);

/* out[t] = sum_j topk_weights[t, j] * expert(topk_ids[t, j])(x[t]). x, out bf16 [T, H]; topk_ids int32 [T, k]
 * (-1: masked); topk_weights f32 [T, k]; w1 bf16 [E, 2I, H] (gate rows, then up rows); w2 bf16 [E, H, I].
 * saved = NULL (save_z = 0 only): no state handed out (see megamoe_backward_routed). */
int megamoe_forward(const MegamoeLayer *layer, uint64_t stream, size_t tokens, uint64_t x, uint64_t topk_ids,
                    uint64_t topk_weights, uint64_t w1, uint64_t w2, uint64_t out, MegamoeSaved **saved);

/* dx bf16 [T, H], dtopk f32 [T, k]; dw1, dw2 in the weights' shapes, bf16 if wgrad_bf16 else f32, written or
 * (accumulate != 0) added to. Same inputs as the forward that returned saved. */
int megamoe_backward(const MegamoeLayer *layer, uint64_t stream, const MegamoeSaved *saved, uint64_t dy,
                     uint64_t x, uint64_t topk_ids, uint64_t topk_weights, uint64_t w1, uint64_t w2, uint64_t dx,
                     uint64_t dw1, uint64_t dw2, uint64_t dtopk, int wgrad_bf16, int accumulate);

/* Backward without a saved state (a layer with save_z = 0): the routing is made again from topk_ids (~13 us),
 * z recomputed; bitwise megamoe_backward. A forward given saved = NULL writes the layer's own scratch state. For
 * callers that cannot carry a handle from forward to backward (PyTorch custom operators). */
int megamoe_backward_routed(const MegamoeLayer *layer, uint64_t stream, size_t tokens, uint64_t dy, uint64_t x,
                            uint64_t topk_ids, uint64_t topk_weights, uint64_t w1, uint64_t w2, uint64_t dx,
                            uint64_t dw1, uint64_t dw2, uint64_t dtopk, int wgrad_bf16, int accumulate);

/* The pair without a saved state for a layer that keeps z (save_z != 0, the in-producer gather: the default):
 * the forward writes z (bf16 [T k, 2I], contiguous; its row order is internal) into the caller's buffer z and
 * hands out no state; the backward takes the same inputs and that z unchanged, makes the routing again (~13 us)
 * and reads z instead of recomputing it. Bitwise megamoe_forward / megamoe_backward. For callers that carry
 * tensors, not handles, from forward to backward (PyTorch custom operators) and keep z. */
int megamoe_forward_z(const MegamoeLayer *layer, uint64_t stream, size_t tokens, uint64_t x, uint64_t topk_ids,
                      uint64_t topk_weights, uint64_t w1, uint64_t w2, uint64_t out, uint64_t z);
int megamoe_backward_routed_z(const MegamoeLayer *layer, uint64_t stream, size_t tokens, uint64_t dy, uint64_t x,
                              uint64_t topk_ids, uint64_t topk_weights, uint64_t w1, uint64_t w2, uint64_t z,
                              uint64_t dx, uint64_t dw1, uint64_t dw2, uint64_t dtopk, int wgrad_bf16,
                              int accumulate);

/* Blockwise FP8 (e4m3; 1 x 128 scales for activations, 128 x 128 for weights; H a multiple of 512, I of 128):
 * weights quantized after each change of the bf16 ones, then the FP8 forward and its straight-through backward
 * (which also takes the bf16 w1, w2 the codes came from). */
typedef struct MegamoeFp8Weights MegamoeFp8Weights;
int megamoe_fp8_weights_new(const MegamoeLayer *layer, MegamoeFp8Weights **out);
int megamoe_fp8_weights_quantize(const MegamoeLayer *layer, uint64_t stream, const MegamoeFp8Weights *w8,
                                 uint64_t w1, uint64_t w2);
void megamoe_fp8_weights_free(MegamoeFp8Weights *w8);
int megamoe_forward_fp8(const MegamoeLayer *layer, uint64_t stream, size_t tokens, uint64_t x, uint64_t topk_ids,
                        uint64_t topk_weights, const MegamoeFp8Weights *w8, uint64_t out, MegamoeSaved **saved);
int megamoe_backward_fp8(const MegamoeLayer *layer, uint64_t stream, const MegamoeSaved *saved, uint64_t dy,
                         uint64_t x, uint64_t topk_ids, uint64_t topk_weights, uint64_t w1, uint64_t w2,
                         const MegamoeFp8Weights *w8, uint64_t dx, uint64_t dw1, uint64_t dw2, uint64_t dtopk,
                         int wgrad_bf16, int accumulate);

/* The FP8 weights as the caller's own buffers (PyTorch tensors, for custom operators): `codes` points to six
 * device addresses, in order: W1 codes u8 [E*2I, H], W1 scales f32 [E*2I/128, H/128], W2 codes u8 [E*H, I],
 * W2 scales f32 [E*H/128, I/128], W1^T codes u8 [E*H, 2I], W1^T scales f32 [E*H/128, 2I/128]. The forward and
 * backward carry no state (a layer with save_z = 0): the backward makes the routing again. All six
 * buffers must be valid in every call (the forward reads the first four). Bitwise the handle
 * path (megamoe_forward_fp8 / megamoe_backward_fp8) on codes of the same weights. */
int megamoe_fp8_quantize_into(const MegamoeLayer *layer, uint64_t stream, uint64_t w1, uint64_t w2,
                              const uint64_t *codes);
int megamoe_forward_fp8_codes(const MegamoeLayer *layer, uint64_t stream, size_t tokens, uint64_t x,
                              uint64_t topk_ids, uint64_t topk_weights, const uint64_t *codes, uint64_t out);
int megamoe_backward_routed_fp8(const MegamoeLayer *layer, uint64_t stream, size_t tokens, uint64_t dy, uint64_t x,
                                uint64_t topk_ids, uint64_t topk_weights, uint64_t w1, uint64_t w2,
                                const uint64_t *codes, uint64_t dx, uint64_t dw1, uint64_t dw2, uint64_t dtopk,
                                int wgrad_bf16, int accumulate);
/* The same pair for a layer that keeps z (save_z != 0), z in the caller's buffer as megamoe_forward_z's (written
 * by the default 128 x 256 FP8 GEMM1; the backward reads it instead of recomputing z). */
int megamoe_forward_fp8_codes_z(const MegamoeLayer *layer, uint64_t stream, size_t tokens, uint64_t x,
                                uint64_t topk_ids, uint64_t topk_weights, const uint64_t *codes, uint64_t out,
                                uint64_t z);
int megamoe_backward_routed_fp8_z(const MegamoeLayer *layer, uint64_t stream, size_t tokens, uint64_t dy,
                                  uint64_t x, uint64_t topk_ids, uint64_t topk_weights, uint64_t w1, uint64_t w2,
                                  const uint64_t *codes, uint64_t z, uint64_t dx, uint64_t dw1, uint64_t dw2,
                                  uint64_t dtopk, int wgrad_bf16, int accumulate);

/* Synchronises; MEGAMOE_INVALID_ARGUMENT if the forward met an expert id outside -1..E (nothing was written). */
int megamoe_saved_check(const MegamoeSaved *saved);
/* No synchronisation: MEGAMOE_INVALID_ARGUMENT for null or a ring slot a later forward overwrote. */
int megamoe_saved_status(const MegamoeSaved *saved);
size_t megamoe_saved_tokens(const MegamoeSaved *saved); /* 0 for null or an overwritten ring slot */
void megamoe_saved_free(MegamoeSaved *saved);

/* Hand megamoe's cached pool memory on `device` back to the driver, keeping keep_bytes (synchronises). */
int megamoe_trim_pool(int device, size_t keep_bytes);

/* The calling thread's last error message: copies at most len bytes with the NUL, returns the full length. */
size_t megamoe_last_error(char *buf, size_t len);
const char *megamoe_version(void);

#ifdef __cplusplus
}
#endif
#endif
