// Surface extraction on analytic fields (a sphere: closed, outward, on the sphere, the right
// volume; two spheres and a torus: the right topology; a surface cut by the grid border: open),
// the OBJ / GLB writers (the extension picks) and the GLB reader, with Python's struct module as
// an independent reader of the GLB layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "mesh/mesh.hpp"
#include "support/glb_check.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using yeto::mesh::Grid;
using yeto::mesh::Mesh;

namespace {

Grid sample(std::int64_t n, const std::function<double(double, double, double)>& f, float half = 1.f) {
  Grid g;
  g.nx = g.ny = g.nz = n;
  g.lo = {-half, -half, -half};
  g.hi = {half, half, half};
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t k = 0; k < n; ++k) {
        const auto c = [&](std::int64_t t) { return -half + 2.0 * half * static_cast<double>(t) / static_cast<double>(n - 1); };
        g.values.push_back(static_cast<float>(f(c(i), c(j), c(k))));
      }
  return g;
}

// V - E + F of a closed mesh.
long euler(const Mesh& m) {
  std::set<std::pair<std::uint32_t, std::uint32_t>> edges;
  for (const auto& f : m.faces)
    for (int e = 0; e < 3; ++e) {
      auto a = f[static_cast<std::size_t>(e)], b = f[static_cast<std::size_t>((e + 1) % 3)];
      edges.insert({std::min(a, b), std::max(a, b)});
    }
  return static_cast<long>(m.vertices.size()) - static_cast<long>(edges.size()) + static_cast<long>(m.faces.size());
}

Mesh sphere_mesh(double r = 0.6, std::int64_t n = 33) {
  // An occupancy-like field: positive inside.
  return yeto::mesh::extract_surface(sample(n, [r](double x, double y, double z) { return r - std::sqrt(x * x + y * y + z * z); }));
}

}  // namespace

TEST(ExtractSurface, SphereIsWatertightOutwardAndOnTheSphere) {
  const double r = 0.6;
  const Mesh m = sphere_mesh(r);
  ASSERT_FALSE(m.faces.empty());
  EXPECT_TRUE(yeto::mesh::watertight(m));
  EXPECT_EQ(euler(m), 2);  // one closed genus-0 surface
  double worst = 0.0;
  for (const auto& v : m.vertices)
    worst = std::max(worst, std::abs(std::sqrt(double(v[0]) * v[0] + double(v[1]) * v[1] + double(v[2]) * v[2]) - r));
  EXPECT_LT(worst, 4e-3);  // linear interpolation of a distance field (cell 0.0625): exact along axes
  const double volume = yeto::mesh::signed_volume(m), exact = 4.0 / 3.0 * M_PI * r * r * r;
  EXPECT_GT(volume, 0.0);  // faces point outward
  EXPECT_NEAR(volume / exact, 1.0, 0.02);
  // Grid values exactly at the level (r 0.5 on a 17^3 grid has grid points on the sphere): the
  // interpolated points coincide, the surface stays closed and consistently oriented.
  const Mesh touching = sphere_mesh(0.5, 17);
  EXPECT_TRUE(yeto::mesh::watertight(touching));
  EXPECT_EQ(euler(touching), 2);
  std::printf("  sphere r %.2f on 33^3: %zu vertices, %zu faces, max radius error %.2g, volume / exact %.4f\n", r,
              m.vertices.size(), m.faces.size(), worst, volume / exact);
}

TEST(ExtractSurface, TopologyOfTwoSpheresAndATorusAndAnOpenSurface) {
  const auto two = yeto::mesh::extract_surface(sample(41, [](double x, double y, double z) {
    const double a = 0.3 - std::sqrt((x - 0.45) * (x - 0.45) + y * y + z * z);
    const double b = 0.3 - std::sqrt((x + 0.45) * (x + 0.45) + y * y + z * z);
    return std::max(a, b);
  }));
  EXPECT_TRUE(yeto::mesh::watertight(two));
  EXPECT_EQ(euler(two), 4);  // two spheres
  const auto torus = yeto::mesh::extract_surface(sample(49, [](double x, double y, double z) {
    const double q = std::sqrt(x * x + y * y) - 0.55;
    return 0.2 - std::sqrt(q * q + z * z);
  }));
  EXPECT_TRUE(yeto::mesh::watertight(torus));
  EXPECT_EQ(euler(torus), 0);  // genus 1
  EXPECT_GT(yeto::mesh::signed_volume(torus), 0.0);
  // A half-space meets the grid's border: the surface is open.
  const auto open = yeto::mesh::extract_surface(sample(9, [](double x, double, double) { return x; }));
  EXPECT_FALSE(open.faces.empty());
  EXPECT_FALSE(yeto::mesh::watertight(open));
  // Nothing crosses the level: no surface.
  EXPECT_TRUE(yeto::mesh::extract_surface(sample(5, [](double, double, double) { return -1.0; })).faces.empty());
}

TEST(ExtractSurface, RefusesBadGrids) {
  Grid g = sample(4, [](double x, double, double) { return x; });
  g.values.pop_back();
  EXPECT_THROW(yeto::mesh::extract_surface(g), std::invalid_argument);
  g = sample(4, [](double x, double, double) { return x; });
  g.values[3] = std::nanf("");
  EXPECT_THROW(yeto::mesh::extract_surface(g), std::invalid_argument);
  g = sample(1, [](double x, double, double) { return x; });
  EXPECT_THROW(yeto::mesh::extract_surface(g), std::invalid_argument);
}

TEST(MeshFiles, GlbRoundTripsThroughOurReaderAndPythonsStruct) {
  yeto::test::TempDir tmp;
  const Mesh m = sphere_mesh(0.5, 17);
  yeto::mesh::write_mesh(tmp / "sphere.glb", m);
  const Mesh back = yeto::mesh::read_glb(tmp / "sphere.glb");
  EXPECT_EQ(back.vertices, m.vertices);
  EXPECT_EQ(back.faces, m.faces);
  EXPECT_TRUE(yeto::mesh::watertight(back));

  // An independent reader: Python's struct and json modules walk the GLB layout and count.
  const auto r = yeto::test::python_glb_counts((tmp / "sphere.glb").string());
  ASSERT_EQ(r.exit_code, 0) << r.all();
  std::ostringstream want;
  want << m.vertices.size() << ' ' << m.faces.size() << '\n';
  EXPECT_EQ(r.out, want.str());
}

TEST(MeshFiles, ObjAndTheExtensionPicksAndReaderErrorsNameTheFile) {
  yeto::test::TempDir tmp;
  const Mesh m = sphere_mesh(0.5, 9);
  yeto::mesh::write_mesh(tmp / "sphere.obj", m);
  const auto text = yeto::test::read_text(tmp / "sphere.obj");
  std::size_t v = 0, f = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    v += line.rfind("v ", 0) == 0;
    f += line.rfind("f ", 0) == 0;
  }
  EXPECT_EQ(v, m.vertices.size());
  EXPECT_EQ(f, m.faces.size());
  EXPECT_NE(text.find("\nf 1 "), std::string::npos);  // 1-based
  try {
    yeto::mesh::write_mesh(tmp / "sphere.stl", m);
    ADD_FAILURE() << "an .stl was written";
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find(".glb"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(tmp / "sphere.stl"));
  EXPECT_THROW(yeto::mesh::write_mesh(tmp / "empty.glb", Mesh{}), yeto::Error);

  const auto glb = yeto::mesh::glb_bytes(m);
  for (const auto& [bytes, says] : std::vector<std::pair<std::string, std::string>>{
           {"glTF", "too short"},
           {"XXXX" + glb.substr(4), "magic"},
           {glb.substr(0, glb.size() - 4), "header says"}}) {
    try {
      yeto::mesh::parse_glb(bytes, "broken.glb");
      ADD_FAILURE() << says;
    } catch (const yeto::Error& e) {
      EXPECT_NE(std::string(e.what()).find("broken.glb"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}
