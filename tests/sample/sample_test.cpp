// `yeto-host sample` end to end on the tiny FLUX.1 repository: the recorded reference picture
// from its prompt and seed alone, bit-identical reruns, one PNG per prompt, an adapter folded
// in (equal to the merged repository), MP4 and frames outputs, and the errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <algorithm>
#include <fstream>

#include <stb_image.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

#include <random>

#include "artifacts/adapter.hpp"
#include "core/error.hpp"
#include "artifacts/merge.hpp"
#include "io/aliases.hpp"
#include "io/hub.hpp"
#include "io/repository.hpp"
#include "io/tensors.hpp"
#include "io/weight_source.hpp"
#include "sample/media.hpp"
#include "data/image.hpp"
#include "sample/png.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kRepo = fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny";
const fs::path kReference = fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny-reference";
const char* kPrompt = "a red circle on a white background";

std::vector<std::string> args(const fs::path& out, const std::string& seed = "42") {
  return {"sample",  "--model",  kRepo.string(), "--diffusion-adapter",   "flux", "--prompt", kPrompt,
          "--seed",  seed,       "--steps",      "4",                     "--guidance", "3.5", "--height",
          "64",      "--width",  "64",           "--max-sequence-length", "32",   "--output", out.string()};
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The PNG as a [H, W, 3] uint8 tensor.
at::Tensor decode(const fs::path& p) {
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load(p.string().c_str(), &w, &h, &n, 3);
  if (!px) return {};
  auto t = torch::from_blob(px, {h, w, 3}, torch::kUInt8).clone();
  stbi_image_free(px);
  return t;
}

// A decoded clip: frame count, size and the RGB bytes of every frame.
struct Clip {
  int frames = 0, width = 0, height = 0;
  std::string codec;
  std::vector<std::uint8_t> rgb;
};

Clip decode_video(const fs::path& p) {
  Clip clip;
  AVFormatContext* fmt = nullptr;
  if (avformat_open_input(&fmt, p.c_str(), nullptr, nullptr) < 0) return clip;
  avformat_find_stream_info(fmt, nullptr);
  const AVCodec* codec = nullptr;
  const int stream = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (stream < 0 || !codec) {
    avformat_close_input(&fmt);
    return clip;
  }
  clip.codec = codec->name;
  AVCodecContext* dec = avcodec_alloc_context3(codec);
  avcodec_parameters_to_context(dec, fmt->streams[stream]->codecpar);
  avcodec_open2(dec, codec, nullptr);
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  SwsContext* sws = nullptr;
  auto drain = [&] {
    while (avcodec_receive_frame(dec, frame) == 0) {
      clip.width = frame->width;
      clip.height = frame->height;
      sws = sws_getCachedContext(sws, frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
                                 frame->width, frame->height, AV_PIX_FMT_RGB24, SWS_BICUBIC | SWS_ACCURATE_RND |
                                 SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr);
      std::vector<std::uint8_t> rgb(static_cast<std::size_t>(frame->width * frame->height * 3));
      std::uint8_t* dst[1] = {rgb.data()};
      const int stride[1] = {frame->width * 3};
      sws_scale(sws, frame->data, frame->linesize, 0, frame->height, dst, stride);
      clip.rgb.insert(clip.rgb.end(), rgb.begin(), rgb.end());
      ++clip.frames;
    }
  };
  while (av_read_frame(fmt, pkt) >= 0) {
    if (pkt->stream_index == stream) avcodec_send_packet(dec, pkt);
    av_packet_unref(pkt);
    drain();
  }
  avcodec_send_packet(dec, nullptr);
  drain();
  sws_freeContext(sws);
  av_frame_free(&frame);
  av_packet_free(&pkt);
  avcodec_free_context(&dec);
  avformat_close_input(&fmt);
  return clip;
}

double mean_abs_diff(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size() || a.empty()) return 1e9;
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
  return sum / static_cast<double>(a.size());
}

// Random LoRA r 4 (alpha 8) on every attention projection of flux-tiny's transformer, written
// as an adapter directory whose record names the base (as export writes it) and the flux plugin.
void write_flux_tiny_adapter(const fs::path& dir, const nlohmann::json& base_override = nullptr) {
  const auto ws = yeto::io::WeightSource::open(kRepo / "transformer");
  yeto::artifacts::AdapterExport e;
  e.r = 4;
  e.alpha = 8;
  e.base_model_class = "FluxTransformer2DModel";
  torch::manual_seed(11);
  for (const auto& n : ws.names()) {
    for (const char* target : {"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight", "attn.to_out.0.weight"}) {
      const std::string t = target;
      if (n.size() < t.size() || n.compare(n.size() - t.size(), t.size(), t) != 0) continue;
      const auto shape = ws.locate(n).info->shape;
      e.modules[n.substr(0, n.size() - 7)] = {torch::randn({4, shape[1]}) * 0.2, torch::randn({shape[0], 4}) * 0.2, 2.0};
    }
  }
  const auto resolved = yeto::io::resolve_model(kRepo.string(), "main", yeto::io::hub_cache());
  const auto repo = yeto::io::DiffusersRepo::open(kRepo);
  e.record["base_model"] = yeto::artifacts::base_model_record(kRepo.string(), resolved.repo, repo, {"transformer"});
  if (!base_override.is_null()) e.record["base_model"].update(base_override);
  e.record["plugin"] = {{"name", "flux"}};
  yeto::artifacts::write_adapter_dir(dir, e);
}

}  // namespace

TEST(Sample, ReproducesTheReferenceImageFromPromptAndSeed) {
  yeto::test::TempDir tmp;
  const auto r = yeto::test::run_host(args(tmp / "ref.png"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto img = decode(tmp / "ref.png");
  ASSERT_TRUE(img.defined());
  ASSERT_EQ(img.sizes(), (std::vector<int64_t>{64, 64, 3}));
  // Diffusers' numpy_to_pil of the recorded image_postprocessed: (x * 255).round().
  const auto expected = yeto::io::load_safetensors(kReference / "expected.safetensors").at("image_postprocessed")[0];
  const auto want = (expected * 255).round().to(torch::kInt).permute({1, 2, 0});
  const auto diff = (img.to(torch::kInt) - want).abs();
  const int max_diff = diff.max().item<int>();
  std::printf("  max |png - reference| = %d / 255 over %lld pixels, %lld differ\n", max_diff,
              static_cast<long long>(diff.numel() / 3), static_cast<long long>(diff.gt(0).sum().item<int64_t>()));
  // The reference's tolerance on image_postprocessed is ~1e-3, far below one 8-bit level, so
  // only values sitting on a rounding boundary may move by one level.
  EXPECT_LE(max_diff, 1);
  EXPECT_LT(diff.gt(0).sum().item<int64_t>(), diff.numel() / 100);
}

TEST(Sample, SameSeedIsBitIdenticalAndAnotherSeedIsNot) {
  yeto::test::TempDir tmp;
  ASSERT_EQ(yeto::test::run_host(args(tmp / "a.png")).exit_code, 0);
  ASSERT_EQ(yeto::test::run_host(args(tmp / "b.png")).exit_code, 0);
  ASSERT_EQ(yeto::test::run_host(args(tmp / "c.png", "7")).exit_code, 0);
  EXPECT_EQ(read_bytes(tmp / "a.png"), read_bytes(tmp / "b.png"));
  EXPECT_NE(read_bytes(tmp / "a.png"), read_bytes(tmp / "c.png"));
}

TEST(Sample, PromptsFileWritesOnePngPerPrompt) {
  yeto::test::TempDir tmp;
  const auto file = tmp.write("prompts.txt", std::string(kPrompt) + "\n\na blue square\r\n");
  auto a = args(tmp / "out.png");
  a[5] = "--prompts";
  a[6] = file.string();
  const auto r = yeto::test::run_host(a);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "out.png"));
  ASSERT_TRUE(fs::exists(tmp / "out-000.png"));
  ASSERT_TRUE(fs::exists(tmp / "out-001.png"));
  EXPECT_EQ(decode(tmp / "out-001.png").sizes(), (std::vector<int64_t>{64, 64, 3}));
  ASSERT_EQ(yeto::test::run_host(args(tmp / "single.png")).exit_code, 0);
  EXPECT_EQ(read_bytes(tmp / "out-000.png"), read_bytes(tmp / "single.png"));  // per prompt, same seed
  EXPECT_NE(read_bytes(tmp / "out-000.png"), read_bytes(tmp / "out-001.png"));
}

// A prompt longer than the text encoders take is cut, and the user is told, once per tokenizer.
TEST(Sample, ACutPromptIsReported) {
  yeto::test::TempDir tmp;
  std::string prompt;
  for (int i = 0; i < 300; ++i) prompt += "a red cat sits on a blue mat ";
  prompt += "and this end is lost";
  auto a = args(tmp / "long.png");
  *(std::find(a.begin(), a.end(), "--prompt") + 1) = prompt;
  const auto r = yeto::test::run_host(a);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const std::string clip = "host component CLIPTokenizer: a text of " + std::to_string(prompt.size()) +
                           " bytes was cut to 77 tokens";
  EXPECT_NE(r.all().find(clip), std::string::npos) << r.all();
  EXPECT_NE(r.all().find("was cut to 32 tokens"), std::string::npos) << r.all();  // T5 at --max-sequence-length 32
  EXPECT_NE(r.all().find("never sees its end: \"...") , std::string::npos) << r.all();
  EXPECT_NE(r.all().find("and this end is lost\""), std::string::npos) << r.all();
  // A prompt that fits says nothing.
  const auto s = yeto::test::run_host(args(tmp / "short.png"));
  ASSERT_EQ(s.exit_code, 0) << s.all();
  EXPECT_EQ(s.all().find("was cut to"), std::string::npos) << s.all();
}

TEST(Sample, ErrorsNameWhatIsWrong) {
  yeto::test::TempDir tmp;
  auto a = args(tmp / "x.png");
  a.insert(a.end(), {"--adapter-dir", (tmp / "nope").string()});
  auto r = yeto::test::run_host(a);
  EXPECT_EQ(r.exit_code, 31) << r.all();
  EXPECT_NE(r.all().find("--adapter-dir " + (tmp / "nope").string()), std::string::npos) << r.all();

  a = args(tmp / "x.gif");
  r = yeto::test::run_host(a);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("'.gif'"), std::string::npos) << r.all();

  r = yeto::test::run_host(
      {"sample", "--model", kRepo.string(), "--diffusion-adapter", "flux", "--output", (tmp / "x.png").string()});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("--prompt"), std::string::npos) << r.all();

  a = args(tmp / "x.png");
  a[8] = "forty-two";
  r = yeto::test::run_host(a);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("--seed"), std::string::npos) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "x.png"));

  // Sizes are bounded before anything is loaded.
  for (const char* side : {"--height", "--width"}) {
    a = args(tmp / "x.png");
    *(std::find(a.begin(), a.end(), side) + 1) = "100000";
    r = yeto::test::run_host(a);
    EXPECT_EQ(r.exit_code, 2) << r.all();
    EXPECT_NE(r.all().find(std::string(side) + ": must be at most 16384, got 100000"), std::string::npos) << r.all();
    EXPECT_EQ(r.all().find("pipeline"), std::string::npos) << r.all();
  }
  EXPECT_FALSE(fs::exists(tmp / "x.png"));
}

// A .glb / .obj output asks for a mesh: a family that generates images has no occupancy field to
// extract one from, which is said before anything is written; a grid of a mesh is refused.
TEST(Sample, MeshOutputsNeedAnOccupancyFieldAndTakeNoGrid) {
  yeto::test::TempDir tmp;
  auto r = yeto::test::run_host(args(tmp / "x.glb"));
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("no 'occupancy' field"), std::string::npos) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "x.glb"));
  auto a = args(tmp / "x.obj");
  a.insert(a.end(), {"--grid", (tmp / "grid.png").string()});
  r = yeto::test::run_host(a);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("--grid: a grid shows images"), std::string::npos) << r.all();
  a = args(tmp / "x.glb");
  a.insert(a.end(), {"--format", "obj"});
  r = yeto::test::run_host(a);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("the output must end in .obj"), std::string::npos) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "x.obj"));
  EXPECT_FALSE(fs::exists(tmp / "grid.png"));
}

TEST(SamplePng, EncodesAndDecodesBack) {
  yeto::test::TempDir tmp;
  std::vector<std::uint8_t> rgb(5 * 7 * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 37);
  yeto::sample::write_png(tmp / "t.png", rgb, 5, 7);
  const auto img = decode(tmp / "t.png");
  ASSERT_EQ(img.sizes(), (std::vector<int64_t>{5, 7, 3}));
  EXPECT_TRUE(std::equal(rgb.begin(), rgb.end(), img.data_ptr<std::uint8_t>()));
  EXPECT_THROW(yeto::data::encode_png(rgb, 5, 8), std::exception);
  EXPECT_EQ(yeto::sample::output_path("d/o.png", 0, 1), fs::path("d/o.png"));
  EXPECT_EQ(yeto::sample::output_path("d/o.png", 12, 20), fs::path("d/o-012.png"));
}

TEST(SampleAdapter, FoldedAdapterEqualsTheMergedRepositoryAndIsRefusedForAnotherBase) {
  yeto::test::TempDir tmp;
  write_flux_tiny_adapter(tmp / "adapter");
  ASSERT_TRUE(fs::exists(tmp / "adapter" / "yeto_diffusion_adapter.json"));

  // Base picture, seed 42.
  auto r = yeto::test::run_host(args(tmp / "base.png"));
  ASSERT_EQ(r.exit_code, 0) << r.all();

  // With the adapter: a JSONL prompts file whose seeds (42) win over --seed 7, twice in one process.
  const std::string line = nlohmann::json({{"prompt", kPrompt}, {"seed", 42}}).dump() + "\n";
  const auto prompts = tmp.write("prompts.jsonl", line + line);
  auto a = args(tmp / "lora.png", "7");
  a[5] = "--prompts";
  a[6] = prompts.string();
  a.insert(a.end(), {"--adapter-dir", (tmp / "adapter").string()});
  r = yeto::test::run_host(a);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("folded 14 LoRA modules of transformer"), std::string::npos) << r.all();

  // The same adapter merged into the base repository, sampled without an adapter.
  r = yeto::test::run_host({"merge", "--model", kRepo.string(), "--adapter-dir", (tmp / "adapter").string(),
                            "--output-dir", (tmp / "merged").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  auto m = args(tmp / "merged.png");
  m[2] = (tmp / "merged").string();
  r = yeto::test::run_host(m);
  ASSERT_EQ(r.exit_code, 0) << r.all();

  const auto base = decode(tmp / "base.png"), lora = decode(tmp / "lora-000.png"), merged = decode(tmp / "merged.png");
  ASSERT_TRUE(base.defined() && lora.defined() && merged.defined());
  const int vs_base = (lora.to(torch::kInt) - base.to(torch::kInt)).abs().max().item<int>();
  const int vs_merged = (lora.to(torch::kInt) - merged.to(torch::kInt)).abs().max().item<int>();
  std::printf("  max |adapter - base| = %d / 255, max |adapter - merged| = %d / 255\n", vs_base, vs_merged);
  EXPECT_GT(vs_base, 0);
  EXPECT_EQ(read_bytes(tmp / "lora-000.png"), read_bytes(tmp / "merged.png"));
  EXPECT_EQ(read_bytes(tmp / "lora-000.png"), read_bytes(tmp / "lora-001.png"));

  // The adapter records a plugin: without --diffusion-adapter it is refused before any plugin loads.
  std::vector<std::string> no_plugin = args(tmp / "x.png");
  no_plugin.erase(no_plugin.begin() + 3, no_plugin.begin() + 5);
  no_plugin.insert(no_plugin.end(), {"--adapter-dir", (tmp / "adapter").string()});
  r = yeto::test::run_host(no_plugin);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("pass --diffusion-adapter flux"), std::string::npos) << r.all();

  // An adapter recorded for another base (its transformer content differs) is refused, naming both.
  write_flux_tiny_adapter(tmp / "other", {{"spec", "org/other-flux"}, {"components", {{"transformer", std::string(64, 'a')}}}});
  auto o = args(tmp / "x.png");
  o.insert(o.end(), {"--adapter-dir", (tmp / "other").string()});
  r = yeto::test::run_host(o);
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_NE(r.all().find("trained on another base"), std::string::npos) << r.all();
  EXPECT_NE(r.all().find("org/other-flux"), std::string::npos) << r.all();
  EXPECT_NE(r.all().find(kRepo.string()), std::string::npos) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "x.png"));
}

TEST(SampleVideo, SampleWritesAOneFrameClipAndAFramesDirectory) {
  yeto::test::TempDir tmp;
  auto a = args(tmp / "clip.mp4");
  a.insert(a.end(), {"--num-frames", "3", "--fps", "8"});
  auto r = yeto::test::run_host(a);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("--num-frames 3 asked, the plugin generated one image"), std::string::npos) << r.all();
  const Clip clip = decode_video(tmp / "clip.mp4");
  EXPECT_EQ(clip.frames, 1);
  EXPECT_EQ(clip.width, 64);
  EXPECT_EQ(clip.height, 64);
  EXPECT_EQ(clip.codec, yeto::sample::default_video_codec() == "libx264" ? "h264" : "mpeg4");

  r = yeto::test::run_host(args(tmp / "frames/"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ASSERT_TRUE(fs::exists(tmp / "frames" / "frame-00000.png"));
  EXPECT_FALSE(fs::exists(tmp / "frames" / "frame-00001.png"));
  const auto frame = decode(tmp / "frames" / "frame-00000.png");
  ASSERT_EQ(frame.sizes(), (std::vector<int64_t>{64, 64, 3}));
  const auto* px = frame.data_ptr<std::uint8_t>();
  const double d = mean_abs_diff(clip.rgb, std::vector<std::uint8_t>(px, px + frame.numel()));
  std::printf("  mean |mp4 frame - png| = %.2f / 255\n", d);
  // The random-weight model's picture is pixel noise, which 4:2:0 chroma subsampling blurs
  // (about 13 levels on average); a wrong or blank frame is off by far more.
  EXPECT_LT(d, 32.0);
}

TEST(SampleMedia, Mp4WriterRoundTripsThroughFfmpegWithEitherEncoder) {
  yeto::test::TempDir tmp;
  const int F = 5, H = 32, W = 48;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(F * H * W * 3));
  for (int f = 0; f < F; ++f)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        auto* p = &rgb[static_cast<std::size_t>(((f * H + y) * W + x) * 3)];
        p[0] = static_cast<std::uint8_t>(x * 5 + f * 20);
        p[1] = static_cast<std::uint8_t>(y * 7);
        p[2] = static_cast<std::uint8_t>(128 + f * 10);
      }
  std::vector<std::string> codecs = {"mpeg4"};
  if (yeto::sample::default_video_codec() == "libx264") codecs.push_back("libx264");
  for (const auto& codec : codecs) {
    const auto path = tmp / (codec + ".mp4");
    EXPECT_EQ(yeto::sample::write_mp4(path, rgb, F, H, W, 12.0, codec), codec);
    const Clip clip = decode_video(path);
    EXPECT_EQ(clip.frames, F) << codec;
    EXPECT_EQ(clip.width, W) << codec;
    EXPECT_EQ(clip.height, H) << codec;
    const double d = mean_abs_diff(clip.rgb, rgb);
    std::printf("  %s: mean |decoded - source| = %.2f / 255\n", codec.c_str(), d);
    EXPECT_LT(d, 6.0) << codec;
    for (const auto& e : fs::directory_iterator(tmp.path()))
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
  EXPECT_THROW(yeto::sample::write_mp4(tmp / "odd.mp4", std::vector<std::uint8_t>(3 * 3 * 3), 1, 3, 3, 8.0),
               yeto::Error);
  EXPECT_FALSE(fs::exists(tmp / "odd.mp4"));
  EXPECT_THROW(yeto::sample::write_mp4(tmp / "short.mp4", rgb, F + 1, H, W, 8.0), yeto::Error);

  const auto files = yeto::sample::write_frames(tmp / "frames", rgb, F, H, W);
  ASSERT_EQ(files.size(), static_cast<std::size_t>(F));
  EXPECT_EQ(files.back(), tmp / "frames" / "frame-00004.png");
  for (int f = 0; f < F; ++f) {
    const auto img = decode(files[static_cast<std::size_t>(f)]);
    ASSERT_EQ(img.sizes(), (std::vector<int64_t>{H, W, 3}));
    const auto begin = rgb.begin() + f * H * W * 3;
    EXPECT_TRUE(std::equal(begin, begin + H * W * 3, img.data_ptr<std::uint8_t>())) << f;
  }
}

TEST(SampleMedia, PromptsFileTakesLinesAndJsonLinesWithSeeds) {
  yeto::test::TempDir tmp;
  const auto ok = tmp.write("p.txt", "a cat\r\n\n{\"prompt\": \"a dog\", \"seed\": 9}\n  {\"prompt\": \"a fox\"}\n");
  const auto e = yeto::sample::read_prompt_entries(ok);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].prompt, "a cat");
  EXPECT_FALSE(e[0].seed.has_value());
  EXPECT_EQ(e[1].prompt, "a dog");
  EXPECT_EQ(e[1].seed, 9u);
  EXPECT_EQ(e[2].prompt, "a fox");
  EXPECT_FALSE(e[2].seed.has_value());
  auto message = [](const fs::path& p) {
    try {
      yeto::sample::read_prompt_entries(p);
    } catch (const yeto::Error& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(tmp.write("s.txt", "ok\n{\"prompt\": \"x\", \"seed\": -1}\n")).find("s.txt:2: key 'seed'"),
            std::string::npos);
  EXPECT_NE(message(tmp.write("k.txt", "{\"text\": \"x\"}\n")).find("k.txt:1: key 'prompt'"), std::string::npos);
  EXPECT_NE(message(tmp.write("j.txt", "{\"prompt\": \n")).find("j.txt:1: not valid JSON"), std::string::npos);
  EXPECT_NE(message(tmp.write("e.txt", "\n\n")).find("holds no prompt"), std::string::npos);
}
