// TokenData: the training data as a sequence of tokens, and the batches drawn from it.
//
// Two formats (docs/ARCHITECTURE.md §5): a `.txt` file is read as bytes, one token per byte (vocab 256); any
// other file is little-endian tokens without a header, uint16 (the nanoGPT / llm.c `.bin`
// convention) or uint32 for vocabularies above 65,536 (train.data_dtype; token_bytes()).
// The file is memory-mapped read-only; nothing is copied or downloaded.
//
// Batches are a pure function of (seed, step): sample j of the global batch of step k is the
// window of T + 1 tokens starting at position hash(seed, k, j) mod (tokens - T). Inputs are the
// first T tokens, targets the last T. Data-parallel rank d of dp takes the contiguous samples
// [d B/dp, (d+1) B/dp), and micro-batch i of that slice the next micro_batch samples, so every
// (dp, micro_batch) split of one global batch sees the same samples.
//
// Thread-safe for concurrent reads once opened. Not copyable; movable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"

namespace stagecraft::runtime {

// The width of a .bin file's tokens, 2 or 4 bytes: data_dtype, or with auto 4 where the
// vocabulary needs it (above 65,536 ids).
int token_bytes(config::DataDtype data_dtype, int vocab);

class TokenData {
 public:
  TokenData() = default;
  TokenData(TokenData&& other) noexcept;
  TokenData& operator=(TokenData&& other) noexcept;
  TokenData(const TokenData&) = delete;
  TokenData& operator=(const TokenData&) = delete;
  ~TokenData();

  // Fails (invalid input) for a missing, unreadable or empty file, a .bin whose size is not a
  // whole number of tokens of `bytes_per_token` (2 or 4), or fewer than min_tokens tokens.
  static Result<TokenData> open(const std::string& path, size_t min_tokens = 2, int bytes_per_token = 2);

  // Wraps tokens held in memory (tests, eval of generated text).
  static TokenData from_tokens(std::vector<uint16_t> tokens);

  size_t size() const { return size_; }
  bool is_text() const { return text_; }
  // Largest token id + 1 (256 for text): the smallest vocabulary that can train on this data.
  int vocab_needed() const { return vocab_needed_; }
  int token(size_t i) const { return text_ ? bytes_[i] : wide_ ? static_cast<int>(wide_[i]) : words_[i]; }

  // Start of sample `sample` of the global batch of `step` for windows of T + 1 tokens.
  size_t sample_start(uint64_t seed, int64_t step, int64_t sample, int T) const;

  // Fills inputs and targets (each samples x T, row-major) with samples
  // [first_sample, first_sample + samples) of the global batch of `step`.
  // Requires size() >= T + 1.
  void batch(uint64_t seed, int64_t step, int64_t first_sample, int samples, int T, int32_t* inputs, int32_t* targets) const;

  // Fills inputs / targets (T each) with the window starting at token `start` (evaluation).
  void window(size_t start, int T, int32_t* inputs, int32_t* targets) const;

 private:
  void release();

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* bytes_ = nullptr;
  const uint16_t* words_ = nullptr;
  const uint32_t* wide_ = nullptr;  // uint32 tokens (below 2^31: larger ids are refused at open)
  std::vector<uint16_t> owned_;
  size_t size_ = 0;
  bool text_ = false;
  int vocab_needed_ = 0;
};

}  // namespace stagecraft::runtime
