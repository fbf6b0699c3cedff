// Which source frames make up a num_frames sample (pure arithmetic, shared by video files and
// frame lists).
//
// 1. Rate: with a target fps (data.fps > 0) and a known source rate, output frame k shows the
//    source frame on screen at time k / fps, i.e. floor(k * source_fps / fps); this drops
//    frames when slowing down the rate and repeats them when speeding it up. Otherwise the
//    source frames are taken as they are.
// 2. Length: a resampled clip longer than num_frames contributes its centred window of
//    num_frames consecutive frames (deterministic, and away from intros and fade-outs); a
//    shorter one is padded at the end by repeating its last frame.
#pragma once

#include <cstdint>
#include <vector>

namespace yeto::data {

struct FrameSelection {
  std::vector<std::int64_t> indices;  // source frame index of each output frame
  std::int64_t resampled_frames = 0;  // length of the clip at the target rate
  std::int64_t padded = 0;            // output frames that repeat the last frame
};

FrameSelection select_frames(std::int64_t source_frames, double source_fps, double target_fps, std::int64_t num_frames);

}  // namespace yeto::data
