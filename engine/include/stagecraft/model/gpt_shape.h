// GptShape: parameter counts and FLOPs of a GPT (decoder-only transformer), by part.
//
// Legend: L layers, h hidden, a heads, f ffn_hidden (4h by default), s sequence length,
// V vocabulary. One transformer layer holds
//   attention: QKV h x 3h + 3h bias, output h x h + h bias        = 4h^2 + 4h
//   MLP:       h x f + f bias, f x h + h bias                      = 2hf + f + h
//   two LayerNorms                                                 = 4h
// so 12h^2 + 13h with f = 4h, as in Narayanan et al. 2021, eq. 2. The embedding holds V h token
// and s h position weights; the head a final LayerNorm (2h) and, untied, its own V x h matrix.
//
// Forward FLOPs per sample (2 per multiply-add): a layer does 2s(4h^2 + 2hf) in its GEMMs and
// 4s^2 h in attention (QK^T and AV), i.e. 24 s h^2 + 4 s^2 h with f = 4h; the head's logits
// GEMM 2 s h V. Backward is twice the forward. Summed over the model this is Korthikanti et al.
// 2022's 72 B s L h^2 (1 + s/(6h) + V/(12 h L)) per iteration of B samples.
#pragma once

#include "stagecraft/config/run_config.h"

namespace stagecraft::model {

struct GptShape {
  double layers = 0, hidden = 0, heads = 0, ffn = 0, seq = 0, vocab = 0;
  bool tied = true;

  static GptShape from(const config::ModelConfig& m) {
    GptShape g;
    g.layers = m.layers;
    g.hidden = m.hidden;
    g.heads = m.heads;
    g.ffn = m.ffn();
    g.seq = m.seq_len;
    g.vocab = m.vocab;
    g.tied = m.tied_embeddings;
    return g;
  }

  double layer_params() const { return 4 * hidden * hidden + 4 * hidden + 2 * hidden * ffn + ffn + hidden + 4 * hidden; }
  double embedding_params() const { return vocab * hidden + seq * hidden; }
  double head_params() const { return 2 * hidden + (tied ? 0.0 : vocab * hidden); }
  double total_params() const { return layers * layer_params() + embedding_params() + head_params(); }

  // Forward FLOPs for one sample of s tokens.
  double layer_forward_flops() const { return 2 * seq * (4 * hidden * hidden + 2 * hidden * ffn) + 4 * seq * seq * hidden; }
  double head_forward_flops() const { return 2 * seq * hidden * vocab; }
};

}  // namespace stagecraft::model
