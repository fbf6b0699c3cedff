#include <cmath>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "mesh/mesh.hpp"

namespace yeto::mesh {
namespace {

using Vec = std::array<double, 3>;

Vec sub(const Vec& a, const Vec& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
Vec cross(const Vec& a, const Vec& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double dot(const Vec& a, const Vec& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

// The six tetrahedra of a cube split along its main diagonal (corner 0 -> corner 7), corners
// numbered x + 2 y + 4 z: each walks from corner 0 to corner 7 along one axis order.
constexpr int kTets[6][4] = {{0, 1, 3, 7}, {0, 1, 5, 7}, {0, 2, 3, 7}, {0, 2, 6, 7}, {0, 4, 5, 7}, {0, 4, 6, 7}};

}  // namespace

Mesh extract_surface(const Grid& g, float level) {
  if (g.nx < 2 || g.ny < 2 || g.nz < 2)
    throw std::invalid_argument("extract_surface: the grid needs at least 2 points per axis, got " +
                                std::to_string(g.nx) + " x " + std::to_string(g.ny) + " x " + std::to_string(g.nz));
  const auto count = static_cast<std::size_t>(g.nx * g.ny * g.nz);
  if (g.values.size() != count)
    throw std::invalid_argument("extract_surface: " + std::to_string(g.values.size()) + " values for a " +
                                std::to_string(g.nx) + " x " + std::to_string(g.ny) + " x " + std::to_string(g.nz) +
                                " grid");
  for (const float v : g.values)
    if (!std::isfinite(v)) throw std::invalid_argument("extract_surface: the field has a non-finite value");

  const std::int64_t n[3] = {g.nx, g.ny, g.nz};
  auto index = [&](std::int64_t i, std::int64_t j, std::int64_t k) { return (i * g.ny + j) * g.nz + k; };
  auto position = [&](std::int64_t p) -> Vec {
    const std::int64_t k = p % g.nz, j = (p / g.nz) % g.ny, i = p / (g.nz * g.ny);
    const std::int64_t ijk[3] = {i, j, k};
    Vec out{};
    for (int a = 0; a < 3; ++a)
      out[a] = g.lo[a] + (static_cast<double>(g.hi[a]) - g.lo[a]) * static_cast<double>(ijk[a]) /
                             static_cast<double>(n[a] - 1);
    return out;
  };

  Mesh mesh;
  std::unordered_map<std::uint64_t, std::uint32_t> on_edge;  // grid edge (lower, higher point) -> vertex
  auto vertex = [&](std::int64_t a, std::int64_t b) -> std::uint32_t {
    if (a > b) std::swap(a, b);
    const auto key = static_cast<std::uint64_t>(a) * count + static_cast<std::uint64_t>(b);
    const auto it = on_edge.find(key);
    if (it != on_edge.end()) return it->second;
    const double va = g.values[static_cast<std::size_t>(a)], vb = g.values[static_cast<std::size_t>(b)];
    const double t = (static_cast<double>(level) - va) / (vb - va);
    const Vec pa = position(a), pb = position(b);
    mesh.vertices.push_back({static_cast<float>(pa[0] + t * (pb[0] - pa[0])),
                             static_cast<float>(pa[1] + t * (pb[1] - pa[1])),
                             static_cast<float>(pa[2] + t * (pb[2] - pa[2]))});
    const auto id = static_cast<std::uint32_t>(mesh.vertices.size() - 1);
    on_edge.emplace(key, id);
    return id;
  };
  // A triangle through the grid edges e0, e1, e2 facing `outward` (from the inside corners to the
  // outside ones). The orientation is decided on the edges' midpoints, never degenerate (the
  // interpolated points can coincide when a grid value equals the level), so that triangles
  // sharing an edge always agree.
  using Edge = std::pair<std::int64_t, std::int64_t>;
  auto midpoint = [&](const Edge& e) {
    const Vec a = position(e.first), b = position(e.second);
    return Vec{(a[0] + b[0]) / 2, (a[1] + b[1]) / 2, (a[2] + b[2]) / 2};
  };
  auto emit = [&](Edge e0, Edge e1, Edge e2, const Vec& outward) {
    const Vec m0 = midpoint(e0), m1 = midpoint(e1), m2 = midpoint(e2);
    if (dot(cross(sub(m1, m0), sub(m2, m0)), outward) < 0) std::swap(e1, e2);
    mesh.faces.push_back({vertex(e0.first, e0.second), vertex(e1.first, e1.second), vertex(e2.first, e2.second)});
  };

  for (std::int64_t i = 0; i + 1 < g.nx; ++i)
    for (std::int64_t j = 0; j + 1 < g.ny; ++j)
      for (std::int64_t k = 0; k + 1 < g.nz; ++k) {
        std::int64_t corner[8];
        bool any_in = false, any_out = false;
        for (int c = 0; c < 8; ++c) {
          corner[c] = index(i + (c & 1), j + ((c >> 1) & 1), k + ((c >> 2) & 1));
          (g.values[static_cast<std::size_t>(corner[c])] > level ? any_in : any_out) = true;
        }
        if (!any_in || !any_out) continue;
        for (const auto& tet : kTets) {
          std::int64_t in[4], out[4];
          int n_in = 0, n_out = 0;
          for (const int c : tet) {
            const auto p = corner[c];
            if (g.values[static_cast<std::size_t>(p)] > level) in[n_in++] = p;
            else out[n_out++] = p;
          }
          if (n_in == 0 || n_out == 0) continue;
          Vec ci{0, 0, 0}, co{0, 0, 0};
          for (int q = 0; q < n_in; ++q)
            for (int a = 0; a < 3; ++a) ci[a] += position(in[q])[a] / n_in;
          for (int q = 0; q < n_out; ++q)
            for (int a = 0; a < 3; ++a) co[a] += position(out[q])[a] / n_out;
          const Vec outward = sub(co, ci);
          if (n_in == 1) {
            emit({in[0], out[0]}, {in[0], out[1]}, {in[0], out[2]}, outward);
          } else if (n_in == 3) {
            emit({out[0], in[0]}, {out[0], in[1]}, {out[0], in[2]}, outward);
          } else {
            // The crossing is a quad through the edges p-r, p-s, q-s, q-r (in that cyclic order);
            // its edge midpoints form a parallelogram, so both halves get the same orientation.
            const Edge pr{in[0], out[0]}, ps{in[0], out[1]}, qs{in[1], out[1]}, qr{in[1], out[0]};
            emit(pr, ps, qs, outward);
            emit(pr, qs, qr, outward);
          }
        }
      }
  return mesh;
}

}  // namespace yeto::mesh
