// Triangle meshes: iso-surface extraction from a scalar field sampled on a regular grid, and the
// mesh files a 3-D family's sampling writes (OBJ, GLB = binary glTF 2.0), with a GLB reader.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace yeto::mesh {

struct Mesh {
  std::vector<std::array<float, 3>> vertices;
  std::vector<std::array<std::uint32_t, 3>> faces;  // counter-clockwise seen from outside
};

// A scalar field on an nx x ny x nz grid, x slowest and z fastest (values[(i * ny + j) * nz + k]
// at point (i, j, k)), spanning [lo, hi] on each axis (grid point i at lo + i (hi - lo) / (n - 1)).
struct Grid {
  std::int64_t nx = 0, ny = 0, nz = 0;
  std::vector<float> values;
  std::array<float, 3> lo{-1.f, -1.f, -1.f}, hi{1.f, 1.f, 1.f};
};

// The surface where the field crosses `level`, "inside" being value > level (an occupancy logit).
// Each grid cube is split into six tetrahedra along its main diagonal (the same split in every
// cube, so neighbouring cubes agree on their shared faces) and each tetrahedron contributes 0, 1
// or 2 triangles; vertices lie on grid edges (linear interpolation) and are shared by every
// triangle that meets them, so a surface that does not reach the grid's border is closed: every
// edge belongs to exactly two triangles of opposite orientation. Triangles face outward (from
// value > level to value < level). Throws std::invalid_argument for a grid smaller than 2 points
// per axis, a size mismatch or a non-finite value.
Mesh extract_surface(const Grid& grid, float level = 0.f);

// Writes the mesh atomically; the extension picks the format: ".glb" (binary glTF 2.0: one mesh,
// float32 POSITION with min / max, uint32 indices) or ".obj" (v / f lines, 1-based). Throws
// yeto::Error (bad_input) for another extension or an empty mesh.
void write_mesh(const std::filesystem::path& path, const Mesh& mesh);
std::string glb_bytes(const Mesh& mesh);
std::string obj_text(const Mesh& mesh);

// Reads a GLB file's first mesh primitive (triangles): POSITION (float32 VEC3) and the indices
// (uint8, uint16 or uint32; none: consecutive triangles). Throws yeto::Error (bad_input) naming the
// file and what is wrong (magic, version, lengths, chunks, accessors, buffer views).
Mesh read_glb(const std::filesystem::path& path);
Mesh parse_glb(const std::string& bytes, const std::string& where);

// Closed, consistently oriented 2-manifold: every undirected edge is used by exactly two faces,
// once in each direction. Empty meshes are not watertight.
bool watertight(const Mesh& mesh);
// Signed volume (positive when the faces point outward).
double signed_volume(const Mesh& mesh);

}  // namespace yeto::mesh
