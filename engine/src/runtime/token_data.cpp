// TokenData: memory-mapped token files and deterministic batches. See token_data.h.
#include "stagecraft/runtime/token_data.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace stagecraft::runtime {

namespace {

// splitmix64 finaliser: a good 64-bit mix, enough for choosing windows.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int token_bytes(config::DataDtype data_dtype, int vocab) {
  switch (data_dtype) {
    case config::DataDtype::kUint16: return 2;
    case config::DataDtype::kUint32: return 4;
    case config::DataDtype::kAuto: break;
  }
  return vocab > 65536 ? 4 : 2;
}

TokenData::TokenData(TokenData&& o) noexcept { *this = std::move(o); }

TokenData& TokenData::operator=(TokenData&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = o.map_;
    map_bytes_ = o.map_bytes_;
    owned_ = std::move(o.owned_);
    bytes_ = o.bytes_;
    words_ = owned_.empty() ? o.words_ : owned_.data();
    wide_ = o.wide_;
    size_ = o.size_;
    text_ = o.text_;
    vocab_needed_ = o.vocab_needed_;
    o.map_ = nullptr;
    o.map_bytes_ = 0;
    o.bytes_ = nullptr;
    o.words_ = nullptr;
    o.wide_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

TokenData::~TokenData() { release(); }

void TokenData::release() {
  if (map_) munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

Result<TokenData> TokenData::open(const std::string& path, size_t min_tokens, int bytes_per_token) {
  if (path.empty()) return Status::invalid_input("train.data: no data file given; set train.data to a .txt, uint16 or uint32 .bin file");
  if (bytes_per_token != 2 && bytes_per_token != 4) return Status::internal("train.data: tokens of 2 or 4 bytes");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::invalid_input("train.data=" + path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::invalid_input("train.data=" + path + ": not a regular file");
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  const size_t width = static_cast<size_t>(bytes_per_token);
  const char* kind = bytes_per_token == 4 ? "uint32" : "uint16";
  TokenData d;
  d.path_ = path;
  d.text_ = ends_with(path, ".txt");
  if (!d.text_ && bytes % width != 0) {
    ::close(fd);
    return Status::invalid_input("train.data=" + path + ": " + std::to_string(bytes) + " bytes is not a whole number of " + kind +
                                 " tokens; a .bin file holds little-endian " + kind + " tokens (train.data_dtype; name text files .txt)");
  }
  d.size_ = d.text_ ? bytes : bytes / width;
  if (d.size_ < min_tokens) {
    ::close(fd);
    return Status::invalid_input("train.data=" + path + ": " + std::to_string(d.size_) + " tokens, need at least " +
                                 std::to_string(min_tokens) + " (model.seq_len + 1)");
  }
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return Status::io_error("train.data=" + path + ": cannot map: " + std::strerror(errno));
  d.map_ = map;
  d.map_bytes_ = bytes;
  if (d.text_) {
    d.bytes_ = static_cast<const uint8_t*>(map);
    d.vocab_needed_ = 256;
  } else if (bytes_per_token == 4) {
    d.wide_ = static_cast<const uint32_t*>(map);
    uint32_t mx = 0;
    for (size_t i = 0; i < d.size_; ++i) mx = std::max(mx, d.wide_[i]);
    if (mx >= (1u << 30)) {  // no vocabulary is that large: a file of another width, or not tokens
      return Status::invalid_input("train.data=" + path + ": token id " + std::to_string(mx) +
                                   " read as uint32; is it a uint16 file? set train.data_dtype: uint16");
    }
    d.vocab_needed_ = static_cast<int>(mx) + 1;
  } else {
    d.words_ = static_cast<const uint16_t*>(map);
    uint16_t mx = 0;
    for (size_t i = 0; i < d.size_; ++i) mx = std::max(mx, d.words_[i]);
    d.vocab_needed_ = static_cast<int>(mx) + 1;
  }
  return d;
}

TokenData TokenData::from_tokens(std::vector<uint16_t> tokens) {
  TokenData d;
  d.owned_ = std::move(tokens);
  d.words_ = d.owned_.data();
  d.size_ = d.owned_.size();
  for (uint16_t t : d.owned_) d.vocab_needed_ = std::max(d.vocab_needed_, static_cast<int>(t) + 1);
  return d;
}

size_t TokenData::sample_start(uint64_t seed, int64_t step, int64_t sample, int T) const {
  const size_t span = size_ - static_cast<size_t>(T);  // starts 0 .. size - T - 1
  const uint64_t h = mix(mix(mix(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(sample));
  return static_cast<size_t>(h % span);
}

void TokenData::window(size_t start, int T, int32_t* inputs, int32_t* targets) const {
  for (int t = 0; t < T; ++t) {
    inputs[t] = token(start + static_cast<size_t>(t));
    targets[t] = token(start + static_cast<size_t>(t) + 1);
  }
}

void TokenData::batch(uint64_t seed, int64_t step, int64_t first_sample, int samples, int T, int32_t* inputs,
                      int32_t* targets) const {
  for (int j = 0; j < samples; ++j) {
    const size_t start = sample_start(seed, step, first_sample + j, T);
    window(start, T, inputs + static_cast<size_t>(j) * T, targets + static_cast<size_t>(j) * T);
  }
}

}  // namespace stagecraft::runtime
