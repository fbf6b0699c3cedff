#include "mesh/mesh.hpp"

#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace yeto::mesh {
namespace {

using nlohmann::json;

constexpr std::uint32_t kMagic = 0x46546C67;      // "glTF"
constexpr std::uint32_t kJsonChunk = 0x4E4F534A;  // "JSON"
constexpr std::uint32_t kBinChunk = 0x004E4942;   // "BIN\0"
constexpr int kFloat = 5126, kUInt = 5125, kUShort = 5123, kUByte = 5121;

void put_u32(std::string& out, std::uint32_t v) {
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
}

std::uint32_t get_u32(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  for (int b = 0; b < 4; ++b) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + b])) << (8 * b);
  return v;
}

template <class T>
void append_raw(std::string& out, const T& value) {
  char buf[sizeof(T)];
  std::memcpy(buf, &value, sizeof(T));  // the host is little-endian, as glTF
  out.append(buf, sizeof(T));
}

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw Error(where + ": " + what, ExitCode::bad_input);
}

void check_mesh(const Mesh& m, const std::string& what) {
  if (m.vertices.empty() || m.faces.empty()) throw Error(what + ": the mesh is empty (no surface)", ExitCode::bad_input);
  for (const auto& f : m.faces)
    for (const auto v : f)
      if (v >= m.vertices.size())
        throw Error(what + ": a face names vertex " + std::to_string(v) + " of " + std::to_string(m.vertices.size()),
                    ExitCode::bad_input);
}

}  // namespace

std::string glb_bytes(const Mesh& m) {
  check_mesh(m, "GLB");
  std::string bin;
  std::array<float, 3> lo{std::numeric_limits<float>::max(), std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::max()};
  std::array<float, 3> hi{-lo[0], -lo[1], -lo[2]};
  for (const auto& v : m.vertices)
    for (int a = 0; a < 3; ++a) {
      append_raw(bin, v[static_cast<std::size_t>(a)]);
      lo[static_cast<std::size_t>(a)] = std::min(lo[static_cast<std::size_t>(a)], v[static_cast<std::size_t>(a)]);
      hi[static_cast<std::size_t>(a)] = std::max(hi[static_cast<std::size_t>(a)], v[static_cast<std::size_t>(a)]);
    }
  const auto position_bytes = bin.size();
  for (const auto& f : m.faces)
    for (const auto i : f) append_raw(bin, i);
  const auto index_bytes = bin.size() - position_bytes;
  while (bin.size() % 4) bin.push_back('\0');

  const json doc = {
      {"asset", {{"version", "2.0"}, {"generator", "yeto"}}},
      {"scene", 0},
      {"scenes", json::array({{{"nodes", json::array({0})}}})},
      {"nodes", json::array({{{"mesh", 0}}})},
      {"meshes", json::array({{{"primitives", json::array({{{"attributes", {{"POSITION", 0}}}, {"indices", 1}, {"mode", 4}}})}}})},
      {"buffers", json::array({{{"byteLength", bin.size()}}})},
      {"bufferViews", json::array({{{"buffer", 0}, {"byteOffset", 0}, {"byteLength", position_bytes}, {"target", 34962}},
                                   {{"buffer", 0}, {"byteOffset", position_bytes}, {"byteLength", index_bytes},
                                    {"target", 34963}}})},
      {"accessors", json::array({{{"bufferView", 0}, {"componentType", kFloat}, {"count", m.vertices.size()},
                                  {"type", "VEC3"}, {"min", lo}, {"max", hi}},
                                 {{"bufferView", 1}, {"componentType", kUInt}, {"count", 3 * m.faces.size()},
                                  {"type", "SCALAR"}}})}};
  std::string text = doc.dump();
  while (text.size() % 4) text.push_back(' ');

  std::string out;
  put_u32(out, kMagic);
  put_u32(out, 2);
  put_u32(out, static_cast<std::uint32_t>(12 + 8 + text.size() + 8 + bin.size()));
  put_u32(out, static_cast<std::uint32_t>(text.size()));
  put_u32(out, kJsonChunk);
  out += text;
  put_u32(out, static_cast<std::uint32_t>(bin.size()));
  put_u32(out, kBinChunk);
  out += bin;
  return out;
}

std::string obj_text(const Mesh& m) {
  check_mesh(m, "OBJ");
  std::ostringstream o;
  o.precision(9);
  o << "# written by yeto\n";
  for (const auto& v : m.vertices) o << "v " << v[0] << ' ' << v[1] << ' ' << v[2] << '\n';
  for (const auto& f : m.faces) o << "f " << f[0] + 1 << ' ' << f[1] + 1 << ' ' << f[2] + 1 << '\n';
  return o.str();
}

void write_mesh(const std::filesystem::path& path, const Mesh& m) {
  const auto ext = path.extension().string();
  if (ext == ".glb") return atomic_write(path, glb_bytes(m));
  if (ext == ".obj") return atomic_write(path, obj_text(m));
  throw Error(path.string() + ": a mesh is written as .glb (binary glTF) or .obj; the extension picks the format",
              ExitCode::bad_input);
}

Mesh parse_glb(const std::string& s, const std::string& where) {
  if (s.size() < 20) bad(where, "too short for a GLB header and a chunk (" + std::to_string(s.size()) + " bytes)");
  if (get_u32(s, 0) != kMagic) bad(where, "not a GLB file (the magic is not 'glTF')");
  if (get_u32(s, 4) != 2) bad(where, "GLB version " + std::to_string(get_u32(s, 4)) + "; only glTF 2.0 is read");
  if (get_u32(s, 8) != s.size())
    bad(where, "the header says " + std::to_string(get_u32(s, 8)) + " bytes, the file has " + std::to_string(s.size()));
  std::string text, bin;
  bool have_bin = false;
  for (std::size_t at = 12; at < s.size();) {
    if (at + 8 > s.size()) bad(where, "a chunk header is cut off at byte " + std::to_string(at));
    const std::size_t len = get_u32(s, at), type = get_u32(s, at + 4);
    if (at + 8 + len > s.size()) bad(where, "a chunk of " + std::to_string(len) + " bytes runs past the end");
    if (at == 12 && type != kJsonChunk) bad(where, "the first chunk is not JSON");
    if (type == kJsonChunk && at == 12) text = s.substr(at + 8, len);
    if (type == kBinChunk && !have_bin) {
      bin = s.substr(at + 8, len);
      have_bin = true;
    }
    at += 8 + len;
  }
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    bad(where, std::string("the JSON chunk is not valid JSON: ") + e.what());
  }
  try {
    const auto& prim = doc.at("meshes").at(0).at("primitives").at(0);
    if (prim.value("mode", 4) != 4) bad(where, "the first primitive is not triangles (mode " + prim["mode"].dump() + ")");
    // The bytes of accessor `a`: element size, count, and a reader of component c of element e.
    auto view_of = [&](const json& acc, std::size_t element, std::size_t count) -> std::pair<std::size_t, std::size_t> {
      const auto& view = doc.at("bufferViews").at(acc.at("bufferView").get<std::size_t>());
      if (view.value("buffer", 0) != 0 || doc.at("buffers").at(0).contains("uri") || !have_bin)
        bad(where, "only the GLB's own binary chunk is read as a buffer");
      const std::size_t offset = view.value("byteOffset", std::size_t{0}) + acc.value("byteOffset", std::size_t{0});
      const std::size_t stride = view.value("byteStride", element);
      if (count > 0 && offset + stride * (count - 1) + element > bin.size())
        bad(where, "an accessor reads past the binary chunk");
      return {offset, stride};
    };
    Mesh m;
    const auto& pos = doc.at("accessors").at(prim.at("attributes").at("POSITION").get<std::size_t>());
    if (pos.at("componentType") != kFloat || pos.at("type") != "VEC3")
      bad(where, "POSITION must be float32 VEC3");
    const auto n = pos.at("count").get<std::size_t>();
    const auto [off, stride] = view_of(pos, 12, n);
    m.vertices.resize(n);
    for (std::size_t v = 0; v < n; ++v) std::memcpy(m.vertices[v].data(), bin.data() + off + v * stride, 12);
    std::vector<std::uint32_t> idx;
    if (prim.contains("indices")) {
      const auto& acc = doc.at("accessors").at(prim.at("indices").get<std::size_t>());
      const int type = acc.at("componentType").get<int>();
      const std::size_t size = type == kUInt ? 4 : type == kUShort ? 2 : type == kUByte ? 1 : 0;
      if (!size || acc.at("type") != "SCALAR") bad(where, "indices must be unsigned 8, 16 or 32-bit SCALAR");
      const auto count = acc.at("count").get<std::size_t>();
      const auto [ioff, istride] = view_of(acc, size, count);
      for (std::size_t i = 0; i < count; ++i) {
        std::uint32_t v = 0;
        std::memcpy(&v, bin.data() + ioff + i * istride, size);
        idx.push_back(v);
      }
    } else {
      for (std::uint32_t i = 0; i < n; ++i) idx.push_back(i);
    }
    if (idx.size() % 3) bad(where, std::to_string(idx.size()) + " indices do not make whole triangles");
    for (std::size_t t = 0; t < idx.size(); t += 3) {
      for (std::size_t c = 0; c < 3; ++c)
        if (idx[t + c] >= n) bad(where, "index " + std::to_string(idx[t + c]) + " of " + std::to_string(n) + " vertices");
      m.faces.push_back({idx[t], idx[t + 1], idx[t + 2]});
    }
    return m;
  } catch (const json::exception& e) {
    bad(where, std::string("the glTF JSON lacks what a mesh needs: ") + e.what());
  }
}

Mesh read_glb(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot be opened", ExitCode::not_found);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_glb(bytes, path.string());
}

bool watertight(const Mesh& m) {
  if (m.faces.empty()) return false;
  std::map<std::pair<std::uint32_t, std::uint32_t>, int> directed;
  for (const auto& f : m.faces)
    for (int e = 0; e < 3; ++e) ++directed[{f[static_cast<std::size_t>(e)], f[static_cast<std::size_t>((e + 1) % 3)]}];
  for (const auto& [edge, count] : directed) {
    if (count != 1) return false;
    const auto it = directed.find({edge.second, edge.first});
    if (it == directed.end() || it->second != 1) return false;
  }
  return true;
}

double signed_volume(const Mesh& m) {
  double v = 0.0;
  for (const auto& f : m.faces) {
    const auto& a = m.vertices[f[0]];
    const auto& b = m.vertices[f[1]];
    const auto& c = m.vertices[f[2]];
    v += (static_cast<double>(a[0]) * (static_cast<double>(b[1]) * c[2] - static_cast<double>(b[2]) * c[1]) -
          static_cast<double>(a[1]) * (static_cast<double>(b[0]) * c[2] - static_cast<double>(b[2]) * c[0]) +
          static_cast<double>(a[2]) * (static_cast<double>(b[0]) * c[1] - static_cast<double>(b[1]) * c[0])) /
         6.0;
  }
  return v;
}

}  // namespace yeto::mesh
