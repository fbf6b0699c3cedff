// A generated captioned image dataset for learner tests: DIR/train.jsonl + DIR/images/*.png.
// Torch-free (stb_image_write).
#pragma once

#include <stb_image_write.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"

namespace yeto::learner::test {

// `rows` captioned size x size PNG images in three visually distinct classes, deterministic.
inline void write_dataset(const std::filesystem::path& dir, int rows, const std::map<int, std::string>& bad = {},
                          int size = 16) {
  std::filesystem::create_directories(dir / "images");
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> jitter(-20, 20);
  const char* captions[] = {"a red horizontal gradient", "a green checkerboard", "a blue vertical stripe"};
  std::string manifest;
  for (int i = 0; i < rows; ++i) {
    const int k = i % 3;
    std::vector<unsigned char> px(static_cast<std::size_t>(size * size * 3));
    for (int y = 0; y < size; ++y)
      for (int x = 0; x < size; ++x) {
        int r = 0, g = 0, b = 0;
        if (k == 0) r = 40 + x * 200 / size;
        if (k == 1) g = ((x * 4 / size + y * 4 / size) % 2) ? 230 : 30;
        if (k == 2) b = (x >= size * 3 / 8 && x < size * 5 / 8) ? 240 : 20;
        const int j = jitter(rng);
        unsigned char* p = &px[static_cast<std::size_t>((y * size + x) * 3)];
        p[0] = static_cast<unsigned char>(std::clamp(r + j, 0, 255));
        p[1] = static_cast<unsigned char>(std::clamp(g + j, 0, 255));
        p[2] = static_cast<unsigned char>(std::clamp(b + j, 0, 255));
      }
    char name[32];
    std::snprintf(name, sizeof name, "images/%03d.png", i);
    stbi_write_png((dir / name).c_str(), size, size, 3, px.data(), size * 3);
    const auto it = bad.find(i + 1);  // 1-based manifest lines
    if (it != bad.end() && it->second == "missing") {
      manifest += std::string("{\"image\": \"images/missing.png\", \"prompt\": \"") + captions[k] + "\"}\n";
    } else if (it != bad.end() && it->second == "corrupt") {
      atomic_write(dir / "images/corrupt.png", "\x89PNG\r\n\x1a\nthis is not a png");
      manifest += std::string("{\"image\": \"images/corrupt.png\", \"prompt\": \"") + captions[k] + "\"}\n";
    } else {
      manifest += std::string("{\"image\": \"") + name + "\", \"prompt\": \"" + captions[k] + "\"}\n";
    }
  }
  atomic_write(dir / "train.jsonl", manifest);
}

#ifdef YETO_TEST_FIXTURES
// A run config training the tiny Flux repository (tests/fixtures/repos/flux-tiny) on the
// dataset above (DIR/data/train.jsonl, 32 x 32) as islands of a DiLoCo run: 2 fragments,
// 2 inner steps, quorum 2, short timeouts. `sync_extra` adds [sync] lines; `tail` adds sections.
inline std::string tiny_flux_islands_toml(int steps, const std::string& sync_extra = "", const std::string& tail = "") {
  const std::filesystem::path repo = std::filesystem::path(YETO_TEST_FIXTURES) / "repos/flux-tiny";
  return "[run]\nthreads = 1\n"
         "[model]\nid = \"" + repo.string() + "\"\nadapter = \"flux\"\nprecision = \"fp32\"\n"
         "[data]\npath = \"data/train.jsonl\"\nheight = 32\nwidth = 32\nworkers = 1\n"
         "[lora]\nr = 4\nalpha = 4.0\n"
         "[train]\nmax_steps = " + std::to_string(steps) + "\nmicro_batch_size = 2\ncheckpoint_every = 0\n"
         "[optimizer]\nlearning_rate = 0.002\nweight_decay = 0.0\nwarmup_steps = 1\n"
         "[diffusion]\nseed = 5\n"
         "[sync]\nfragments = 2\ninner_steps = 2\nquorum = 2\nheartbeat_s = 0.2\nlearner_timeout_s = 3\n"
         "grace_max_s = 4\nround_deadline_s = 8\nreconnect_budget_s = 30\nfinal_timeout_s = 10\n" + sync_extra + tail;
}
#endif

}  // namespace yeto::learner::test
