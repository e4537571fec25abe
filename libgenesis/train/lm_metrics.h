#pragma once
// Language-model measures: loss, perplexity and bits per byte on a token shard, the training
// FLOPs per token, and the peak rate that model-FLOPs utilization (MFU) is measured against.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "libgenesis/data/shards.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/models/causal_lm.h"

namespace genesis::train {

// An evaluation split over the ranks of a distributed run: rank r evaluates batches r, r + world,
// r + 2 world, ... and `sum` adds the partial sums over the ranks (in place; empty on one rank).
struct EvalShare {
  int rank = 0;
  int world = 1;
  std::function<void(std::vector<double>&)> sum;
  // Told after each batch this rank evaluated: batches done and in all (progress on stderr).
  std::function<void(int64_t done, int64_t total)> progress;

  // Every rank evaluates every batch and keeps its own sums (ZeRO-3: each forward gathers the
  // parameters, a collective, so the ranks must run the same forwards).
  bool lockstep = false;

  bool mine(int64_t batch) const { return lockstep || batch % world == rank; }
  void reduce(std::vector<double>& partial) const {
    if (sum && !lockstep) sum(partial);
  }
  void report(int64_t done, int64_t total) const {
    if (progress) progress(done, total);
  }
};

// The byte length of every token id's decoded bytes: decoding is concatenation, so the bytes
// a sequence decodes to are the sum of these.
std::vector<uint32_t> token_byte_lengths(const data::Tokenizer& tokenizer);

// Every window of seq_len + 1 tokens starting at a multiple of seq_len (as the training loader
// cuts them), in batches of up to batch_size, in eval mode and without grad. Returns
//   loss           mean next-token cross-entropy (nats) over the evaluated targets
//   perplexity     exp(loss)
//   bits_per_byte  loss * tokens / (bytes * ln 2), bytes = the UTF-8 bytes the targets decode to
//   tokens, bytes  what was evaluated
// Every rank of `share` gets the same figures.
std::map<std::string, double> evaluate_lm(models::CausalLM& model, const data::TokenShard& shard, int64_t seq_len,
                                          int64_t batch_size, const std::vector<uint32_t>& token_bytes, Device device,
                                          const EvalShare& share = {});

// Training FLOPs per token for sequences of seq_len: 6 N (forward and backward through every
// weight a token meets in a matmul: embeddings used only as lookups are left out, the tied
// output head counted) plus 12 L d seq_len for the attention scores and their weighted sum
// (PaLM's estimate, appendix B; causal masking not discounted). A frozen weight counts 4 N (no
// weight gradient), or 2 N while no parameter registered before it trains (no input gradient).
double training_flops_per_token(const models::CausalLM& model, int64_t seq_len);

struct PeakRate {
  double flops_per_s = 0;  // 0 when unknown: MFU is not reported
  std::string source;      // what the figure is, for logs and summary.json
};
// requested_tflops > 0 wins. Otherwise on CUDA the GPU's dense bf16 tensor-core peak from its
// name (H100 SXM / H200: 989 TFLOP/s, H100 PCIe: 756, A100: 312), and on the CPU the rate of
// an f32 1024^3 GEMM measured now with the current thread settings.
PeakRate peak_flops(Device device, double requested_tflops);

}  // namespace genesis::train
