// Safetensors read and write. See safetensors.h.
#include "stagecraft/runtime/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>

#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"

namespace stagecraft::runtime {

namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;  // the format's own limit is 100 MB

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A tensor whose header entry has been checked, before its data is read.
struct Pending {
  NamedTensor t;
  std::string dtype;
  uint64_t begin, end;  // data bytes, from the start of the data
};

// Reads and converts the data of `pending` (in file order) into `out`'s tensors.
Result<TensorFile> decode(std::ifstream& in, const std::string& path, uint64_t data_start, std::vector<Pending>& pending, TensorFile out) {
  std::vector<unsigned char> buf;
  for (auto& p : pending) {
    const uint64_t bytes = p.end - p.begin;
    buf.resize(static_cast<size_t>(bytes));
    in.seekg(static_cast<std::streamoff>(data_start + p.begin));
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(bytes));
    if (!in) return Status::io_error(path + ": reading tensor " + p.t.name + " failed");
    const size_t numel = static_cast<size_t>(p.t.numel());
    p.t.data.resize(numel);
    if (p.dtype == "F32") {
      std::memcpy(p.t.data.data(), buf.data(), bytes);
    } else {
      for (size_t i = 0; i < numel; ++i) {
        const uint16_t v = static_cast<uint16_t>(buf[2 * i] | (buf[2 * i + 1] << 8));
        p.t.data[i] = p.dtype == "F16" ? half_to_float(v) : bf16_to_float(v);
      }
    }
    out.tensors.push_back(std::move(p.t));
  }
  return out;
}

}  // namespace

const NamedTensor* TensorFile::find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [k, v] : metadata) meta.set(k, v);
    header.set("__metadata__", std::move(meta));
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (static_cast<size_t>(t.numel()) != t.data.size()) {
      return Status::internal("safetensors: tensor " + t.name + " has " + std::to_string(t.data.size()) + " values for its shape");
    }
    Json e = Json::object();
    e.set("dtype", "F32");
    Json shape = Json::array();
    for (int64_t d : t.shape) shape.push_back(Json(static_cast<long long>(d)));
    e.set("shape", std::move(shape));
    Json offs = Json::array();
    offs.push_back(Json(static_cast<unsigned long long>(offset)));
    offset += t.data.size() * sizeof(float);
    offs.push_back(Json(static_cast<unsigned long long>(offset)));
    e.set("data_offsets", std::move(offs));
    header.set(t.name, std::move(e));
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::string bytes;
  bytes.reserve(8 + h.size() + offset);
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  bytes += h;
  for (const auto& t : tensors) {
    bytes.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));  // little-endian host
  }
  return config::write_text_file_atomic(path, bytes);
}

Result<TensorFile> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::invalid_input(path + ": cannot open checkpoint file");
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  if (end < 8) return Status::invalid_input(path + ": not a safetensors file (shorter than its 8-byte header length)");
  const uint64_t file_size = static_cast<uint64_t>(end);
  in.seekg(0);
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeader || n > file_size - 8) {
    return Status::invalid_input(path + ": not a safetensors file (header length " + std::to_string(n) + " exceeds the file)");
  }
  std::string h(static_cast<size_t>(n), '\0');
  in.read(h.data(), static_cast<std::streamsize>(n));
  auto header = Json::parse(h);
  if (!header.ok()) return Status::invalid_input(path + ": safetensors header is not JSON: " + header.status().message());
  if (!header->is_object()) return Status::invalid_input(path + ": safetensors header is not a JSON object");
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = file_size - data_start;
  TensorFile out;
  std::vector<Pending> pending;
  for (const auto& [name, e] : header->as_object()) {
    if (name == "__metadata__") {
      if (e.is_object()) {
        for (const auto& [k, v] : e.as_object()) {
          if (v.is_string()) out.metadata[k] = v.as_string();
        }
      }
      continue;
    }
    const Json* dtype = e.find("dtype");
    const Json* shape = e.find("shape");
    const Json* offs = e.find("data_offsets");
    if (!dtype || !dtype->is_string() || !shape || !shape->is_array() || !offs || !offs->is_array() || offs->size() != 2 ||
        !(*offs)[0].is_int() || !(*offs)[1].is_int()) {
      return Status::invalid_input(path + ": tensor " + name + ": needs dtype, shape and data_offsets [begin, end]");
    }
    Pending p;
    p.t.name = name;
    p.dtype = dtype->as_string();
    uint64_t numel = 1;
    for (const auto& d : shape->as_array()) {
      if (!d.is_int() || d.as_int() < 0 || d.as_int() > (int64_t{1} << 40)) {
        return Status::invalid_input(path + ": tensor " + name + ": bad shape");
      }
      p.t.shape.push_back(d.as_int());
      const uint64_t dim = static_cast<uint64_t>(d.as_int());
      if (dim != 0 && numel > (uint64_t{1} << 40) / dim) return Status::invalid_input(path + ": tensor " + name + ": shape too large");
      numel *= dim;
    }
    const int64_t b = (*offs)[0].as_int(), en = (*offs)[1].as_int();
    if (b < 0 || en < b || static_cast<uint64_t>(en) > data_size) {
      return Status::invalid_input(path + ": tensor " + name + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                                   "] outside the file's " + std::to_string(data_size) + " data bytes (truncated file?)");
    }
    const uint64_t elem = p.dtype == "F32" ? 4 : (p.dtype == "F16" || p.dtype == "BF16") ? 2 : 0;
    if (elem == 0) return Status::invalid_input(path + ": tensor " + name + ": dtype " + p.dtype + " is not F32, F16 or BF16");
    if (static_cast<uint64_t>(en - b) != numel * elem) {
      return Status::invalid_input(path + ": tensor " + name + ": " + std::to_string(en - b) + " bytes for " + std::to_string(numel) +
                                   " " + p.dtype + " values");
    }
    p.begin = static_cast<uint64_t>(b);
    p.end = static_cast<uint64_t>(en);
    pending.push_back(std::move(p));
  }
  std::sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) { return a.begin < b.begin; });
  // Each byte of data belongs to one tensor at most, so what is decoded is bounded by the file's
  // size (a header of many entries over the same bytes could otherwise ask for any amount).
  for (size_t i = 1; i < pending.size(); ++i) {
    if (pending[i].begin < pending[i - 1].end) {
      return Status::invalid_input(path + ": tensors " + pending[i - 1].t.name + " and " + pending[i].t.name +
                                   " share data bytes (data_offsets overlap): not a valid safetensors file");
    }
  }
  try {
    return decode(in, path, data_start, pending, std::move(out));
  } catch (const std::bad_alloc&) {
    return Status::unavailable(path + ": out of memory reading its tensors");
  }
}

}  // namespace stagecraft::runtime
