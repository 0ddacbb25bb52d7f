// Safetensors: the tensor file format of Hugging Face checkpoints, read and written.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// padded with spaces to a multiple of 8, then the raw little-endian data. Stagecraft writes F32;
// it reads F32, F16 and BF16 (converted to float). The reader checks every offset and size
// against the file before touching data, so a truncated or hostile file is an error, not a crash.
// Writes are atomic (temporary file, fsync, rename).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::runtime {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // product(shape) values, row-major

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct TensorFile {
  std::vector<NamedTensor> tensors;              // in file order of their data
  std::map<std::string, std::string> metadata;  // "__metadata__"

  const NamedTensor* find(const std::string& name) const;
};

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});
Result<TensorFile> read_safetensors(const std::string& path);

}  // namespace stagecraft::runtime
