#include "config/schema.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/strings.hpp"

namespace yeto::config {
namespace {

using List = std::vector<std::string>;

// Fluent builder so the table below reads as data.
struct K {
  KeyDef d;
  K(std::string key, Type type, Value def, std::string doc) {
    d.key = std::move(key);
    d.type = type;
    d.default_value = std::move(def);
    d.doc = std::move(doc);
  }
  K& flag(std::string f) { d.flag = std::move(f); return *this; }
  K& choices(List c) { d.choices = std::move(c); return *this; }
  K& range(std::optional<double> lo, std::optional<double> hi) { d.min = lo; d.max = hi; return *this; }
  K& default_when(std::string key, Value equals, Value value) {
    d.default_when.push_back({std::move(key), std::move(equals), std::move(value)});
    return *this;
  }
  operator KeyDef() const { return d; }  // NOLINT: implicit on purpose, for the table
};

K B(std::string k, bool v, std::string doc) { return K(std::move(k), Type::boolean, v, std::move(doc)); }
K I(std::string k, std::int64_t v, std::string doc) { return K(std::move(k), Type::integer, v, std::move(doc)); }
K F(std::string k, double v, std::string doc) { return K(std::move(k), Type::number, v, std::move(doc)); }
K S(std::string k, std::string v, std::string doc) { return K(std::move(k), Type::string, std::move(v), std::move(doc)); }
K P(std::string k, std::string v, std::string doc) { return K(std::move(k), Type::path, std::move(v), std::move(doc)); }
K C(std::string k, std::string v, List choices, std::string doc) {
  K key(std::move(k), Type::choice, std::move(v), std::move(doc));
  key.choices(std::move(choices));
  return key;
}
K L(std::string k, List v, std::string doc) { return K(std::move(k), Type::string_list, std::move(v), std::move(doc)); }
K A(std::string k, Value v, std::string doc) { return K(std::move(k), Type::integer_or_auto, std::move(v), std::move(doc)); }

const List kLogLevels = {"trace", "debug", "info", "warn", "error", "critical", "off"};

std::vector<KeyDef> build_schema() {
  std::vector<KeyDef> s = {
      // [run]
      P("run.output", "runs/latest", "Run directory: checkpoints, metrics.jsonl, TensorBoard events, the resolved config and provenance.").flag("output"),
      S("run.name", "", "Human-readable run name recorded in provenance and metrics; empty: the output directory's name."),
      I("run.threads", 0, "CPU threads for LibTorch and OpenMP; 0: all cores of the machine.").range(0, 1024),
      C("run.device", "auto", {"auto", "cpu", "cuda"}, "Compute device; auto: CUDA when this build and the machine have it, else CPU."),

      // [model]
      S("model.id", "", "Model to train: a local Diffusers directory, an org/name id resolved offline from the Hugging Face cache, or a built-in alias (flux-dev, sd35, ...).").flag("model"),
      S("model.kind", "auto", "Model family served by a plugin (flux, sd35, pixart, ltx, wan, ...); auto: from the alias table or model_index.json.").flag("model-kind"),
      S("model.revision", "main", "Branch, tag or commit of an org/name model; always resolved to the immutable commit recorded in provenance.").flag("model-revision"),
      S("model.adapter", "", "Name of the family plugin to load (the diffusion adapter); empty: the plugin a built-in alias names.").flag("diffusion-adapter"),
      B("model.trust_remote_code", false, "Accepted for compatibility; Yeto never executes code shipped in a model repository, so this only silences that warning.").flag("trust-remote-code"),
      P("model.hub_cache", "", "Hugging Face hub cache directory; empty: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."),
      C("model.precision", "auto", {"auto", "fp32", "bf16", "fp16"}, "Compute precision of the frozen base; LoRA weights and the loss stay float32. auto: bf16 where supported, else fp32."),
      I("model.block_swap", 0, "Block swap: the number of the denoiser's transformer blocks (its last ones, over all of its block stacks) whose frozen Linear weights stay in host memory (page-locked) instead of on the GPU; each weight is copied to the GPU just before its GEMM and again for its input gradient in backward, the next one prefetched on a side stream, so the GPU holds the other blocks plus about one Linear weight of the swapped ones. Biases, norms and LoRA stay on the GPU. 0: every block on the GPU. Needs a CUDA device (refused on the CPU, where the blocks are in host memory already) and train.shard other than fsdp.").range(0, std::nullopt),
      C("model.storage", "auto", {"auto", "fp8"}, "Storage of the frozen base weights. auto: as model.precision (a checkpoint in that dtype stays file-backed, without a copy). fp8: the Linear weights of the model's own components (the denoiser) are kept as e4m3 codes with one float32 scale per row (half of bf16) and dequantised per layer to model.precision in forward (a published scaled fp8 checkpoint, e.g. NAVA_fp8.safetensors, keeps its own codes and scales; under auto its e4m3 weights are dequantised code x scale to model.precision); biases, norms, the VAE and text encoders stay in model.precision. LoRA only (tuning.mode = full needs auto)."),
      C("model.scheduler_timesteps", "diffusers-0.33", {"diffusers-0.33", "diffusers-0.37"}, "Which Diffusers release's timestep table the sampling scheduler follows where releases differ (only UniPC with flow sigmas, e.g. Wan): diffusers-0.33 (v0.33.1 - v0.36.0; 4 Wan steps: 999, 899, 749, 499) or diffusers-0.37 (v0.37.0 and later: 999, 900, 750, 500)."),
      I("model.max_sequence_length", 0, "Text tokens the family's sequence encoder (e.g. T5) is given in training, caching and the validation renders; 0: the family's default (FLUX.1: 512).").flag("max-sequence-length").range(0, 4096),

      // [plugins]
      L("plugins.dirs", {"plugins"}, "Directories searched for signed plugins (relative paths: from the config file, then the install)."),
      L("plugins.trusted_keys", {}, "Public key files whose signatures are trusted, besides the build's own key."),
      L("plugins.revoked_keys", {}, "Key fingerprints that are refused even when listed as trusted."),
      L("plugins.accept_licenses", {}, "Plugins whose license notice you acknowledge (required for plugins that ask for it)."),
      B("plugins.allow_unsigned", false, "Development only: also load plugins that are unsigned or signed by an unknown key (tampered and revoked ones stay refused); warns on every load.").flag("allow-unsigned-plugins"),

      // [data]
      S("data.path", "", "Training data: a JSON/JSONL manifest, a directory holding one, or an org/name dataset id from the hub cache.").flag("data"),
      S("data.revision", "main", "Branch, tag or commit of an org/name dataset.").flag("data-revision"),
      C("data.format", "auto", {"auto", "json", "jsonl", "directory", "hub", "parquet", "arrow"}, "Manifest format; auto: from the file extension.").flag("data-format"),
      I("data.height", 512, "Training height in pixels for raw media.").flag("height").range(8, 16384),
      I("data.width", 512, "Training width in pixels for raw media.").flag("width").range(8, 16384),
      C("data.resize_mode", "center-crop", {"stretch", "center-crop"}, "How raw media is brought to height x width.").flag("resize-mode"),
      I("data.num_frames", 1, "Frames per video sample; long clips are sampled deterministically, short ones padded with the last frame.").flag("num-frames").range(1, 100000),
      F("data.fps", 0.0, "Resample videos to this frame rate; 0: keep the source rate.").flag("fps").range(0.0, 1000.0),
      B("data.bucket_by_shape", false, "Group rows by (frames, height, width) so shapes never mix within a micro batch.").flag("bucket-by-shape"),
      B("data.cache_latents", false, "Use precomputed latents (yeto-host cache) instead of encoding media every step.").flag("cache-latents"),
      B("data.cache_text_embeds", false, "Use precomputed text embeddings instead of running the text encoders.").flag("cache-text-embeds"),
      I("data.cache_rows_per_shard", 64, "yeto-host cache: rows per safetensors shard (the unit an interrupted run resumes from).").range(1, 1000000),
      I("data.cache_batch_size", 4, "yeto-host cache: rows per encoder call.").range(1, 4096),
      S("data.image_column", "image", "Manifest field holding an image path or inline base64 bytes.").flag("image-column"),
      S("data.video_column", "video", "Manifest field holding a video path, a frames directory or a list of images.").flag("video-column"),
      S("data.latent_column", "latents", "Manifest field holding cached latents (inline or a .pt/.npy/.safetensors path).").flag("latent-column"),
      S("data.prompt_column", "prompt", "Manifest field holding the caption.").flag("prompt-column"),
      S("data.text_embeds_column", "prompt_embeds", "Manifest field holding cached text embeddings.").flag("text-embeds-column"),
      S("data.text_attention_mask_column", "prompt_attention_mask", "Manifest field holding the cached embeddings' attention mask.").flag("text-attention-mask-column"),
      S("data.pooled_text_embeds_column", "pooled_prompt_embeds", "Manifest field holding cached pooled text embeddings.").flag("pooled-text-embeds-column"),
      S("data.audio_column", "audio", "Manifest field holding a video row's sound file (when absent, the video's own sound track is used).").flag("audio-column"),
      B("data.audio", false, "Hand the model each video row's sound as the tensor \"audio\" [channels, samples], cut to the time span of the row's sampled frames. A model whose plugin declares an audio input turns this on itself.").flag("audio"),
      I("data.audio_sample_rate", 16000, "Sample rate the audio is resampled to; a model that declares an audio input sets it (setting it to another value is refused).").range(1000, 384000),
      I("data.audio_channels", 1, "Audio channels: 1 (the mean of the source's channels) or 2 (a mono source duplicated); a model that declares an audio input sets it.").range(1, 2),
      L("data.tensor_shapes", {}, "Expected per-row shapes of cached tensors, NAME=[d0, d1, ...] with -1 for any size, optionally followed by ' with latents' (rows of cached latents must carry it); a row whose tensor differs is a bad row. A model's plugin may declare them too."),
      C("data.on_bad_row", "error", {"error", "skip"}, "What to do with a row that cannot be used: stop with its row number, or skip it and count it."),
      B("data.allow_path_escape", false, "Allow manifest paths that resolve outside the manifest's directory."),
      I("data.max_pixels", 64LL << 20, "Largest declared width x height accepted before decoding (decompression bombs are refused).").range(1, std::nullopt),
      I("data.max_frames", 4096, "Largest number of frames decoded from one video.").range(1, std::nullopt),
      I("data.workers", 2, "Decoding threads of the prefetching loader.").range(0, 256),
      I("data.decode_memory_mb", 1024, "Memory that media decoding may hold at once across all decoding threads, in MiB: a row reserves its estimated peak (from its header) and waits until it fits; a row larger than this runs alone.").range(1, std::nullopt),
      I("data.prefetch", 4, "Micro batches decoded ahead of training.").range(1, 1024),

      // [validation]
      S("validation.data", "", "Held-out data (same forms as data.path); empty: split off data.path by validation.split.").flag("validation-data"),
      F("validation.split", 0.0, "Fraction of data.path held out for validation when validation.data is empty.").flag("validation-split").range(0.0, 0.9),
      I("validation.every", 0, "Evaluate val_loss every N optimizer steps; 0: only at the start and the end.").flag("validation-every").range(0, std::nullopt),
      I("validation.max_rows", 64, "At most this many held-out rows per evaluation.").range(1, std::nullopt),
      I("validation.draws", 1, "Timestep and noise draws per held-out row in each evaluation (the same draws every time); val_loss is their mean and, with more than one, val_loss_stderr its standard error. One draw's loss moves with its timestep far more than two models differ: with few held-out rows, comparing runs by val_loss needs many draws.").range(1, 4096),
      I("validation.sample_every", 0, "Render validation.prompts with the weights being trained every N optimizer steps, and at the start and the end (RUN_DIR/samples/, TensorBoard images); 0: never.").range(0, std::nullopt),
      L("validation.prompts", {}, "Prompts rendered every validation.sample_every steps (each from validation.sample_seed + its index), so a run shows what it learns."),
      I("validation.sample_steps", 8, "Denoising steps of a validation render.").range(1, 1000),
      I("validation.sample_seed", 0, "Seed of the first validation prompt's render (prompt i uses seed + i): the same noise at every step.").range(0, std::nullopt),
      F("validation.sample_guidance", 3.5, "Guidance of the validation renders.").range(0.0, std::nullopt),
      I("validation.sample_height", 0, "Height of the validation renders; 0: data.height.").range(0, 16384),
      I("validation.sample_width", 0, "Width of the validation renders; 0: data.width.").range(0, 16384),

      // [tuning] / [lora]
      C("tuning.mode", "lora", {"lora", "full"}, "What is trained: LoRA adapters on the denoisers, or every denoiser parameter (experimental).").flag("tuning"),
      I("lora.r", 16, "LoRA rank.").flag("lora-r").range(1, 4096),
      F("lora.alpha", 16.0, "LoRA alpha; the adapter output is scaled by alpha / r.").flag("lora-alpha").range(0.0, std::nullopt),
      F("lora.dropout", 0.0, "Dropout on the LoRA input during training.").flag("lora-dropout").range(0.0, 0.99),
      L("lora.targets", {"auto"}, "Modules that get adapters: auto | attention | all-linear, or module-name patterns.").flag("lora-targets"),

      // [train]
      C("train.shard", "none", {"none", "ddp", "fsdp"}, "How ranks within an island share work (WORLD_SIZE > 1): ddp replicates the frozen base and averages the LoRA gradients across the ranks; fsdp does the same with the frozen base sharded: each rank keeps 1/WORLD_SIZE of every denoiser block's frozen parameters (in the storage dtype, fp8 included) and all-gathers them only while they are used, one Linear weight at a time (for its forward, its recomputation in backward and its input gradient; the next one prefetched while the current one computes), freeing each after. LoRA tensors stay replicated, so checkpoints, export and the syncer see the same names and bytes as with ddp. fsdp with tuning.mode = \"full\" is refused.").flag("shard"),
      I("train.island_ranks", 1, "Ranks per learner island that `yeto-host train --islands N` starts, each a process with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set (> 1 needs train.shard = \"ddp\" or \"fsdp\"). A learner started by another launcher takes its rank count from WORLD_SIZE, which must then equal this when this is > 1.").flag("island-ranks").range(1, 1024),
      F("train.rendezvous_timeout_s", 300.0, "How long the ranks of an island wait for each other at start-up (the MASTER_ADDR:MASTER_PORT rendezvous) before failing with how many joined.").range(1.0, std::nullopt),
      A("train.micro_batch_size", std::int64_t{1}, "Samples per forward/backward; auto: probe and pick the largest that fits.").flag("micro-batch-size"),
      I("train.gradient_accumulation", 1, "Micro batches accumulated per optimizer step.").flag("gradient-accumulation").range(1, 65536),
      I("train.max_steps", 1000, "Optimizer steps to train.").flag("max-steps").range(0, std::nullopt),
      F("train.max_grad_norm", 1.0, "Clip the global gradient norm to this; 0: no clipping.").range(0.0, std::nullopt),
      I("train.checkpoint_every", 100, "Write a resumable local checkpoint every N steps; 0: only at the end.").range(0, std::nullopt),
      B("train.activation_checkpointing", false, "Recompute the denoiser's transformer blocks' activations in backward instead of keeping them (every family): about one extra forward per step for much less activation memory.").flag("activation-checkpointing"),
      I("train.activation_checkpointing_every", 1, "With train.activation_checkpointing: recompute every k-th block (blocks numbered 0, 1, ... over all of the denoiser's block stacks; block i when i % k == 0). 1: every block (least memory); 2: every other block (half the recomputation, about half the saving).").range(1, std::nullopt),
      I("train.memory_budget_mb", 0, "CPU memory budget for micro_batch_size = auto; 0: 80 % of available memory.").range(0, std::nullopt),

      // [optimizer]
      F("optimizer.learning_rate", 1e-4, "AdamW learning rate.").flag("learning-rate").range(0.0, std::nullopt),
      F("optimizer.beta1", 0.9, "AdamW beta1.").range(0.0, 1.0),
      F("optimizer.beta2", 0.999, "AdamW beta2.").range(0.0, 1.0),
      F("optimizer.eps", 1e-8, "AdamW epsilon.").range(0.0, std::nullopt),
      F("optimizer.weight_decay", 0.01, "AdamW decoupled weight decay.").range(0.0, std::nullopt),
      C("optimizer.schedule", "constant", {"constant", "linear", "cosine"}, "Learning-rate schedule after warm-up."),
      I("optimizer.warmup_steps", 0, "Linear warm-up steps.").range(0, std::nullopt),

      // [diffusion]
      I("diffusion.seed", 0, "Seed from which every RNG stream is derived (LoRA init, row order, timesteps, noise, loader).").flag("diffusion-seed").range(0, std::nullopt),
      S("diffusion.loss", "flow_matching", "Training objective; flow_matching is the only one (the scheduler's target type decides velocity, epsilon, sample or v)."),
      C("diffusion.loss_weighting", "none", {"none", "linear", "sigma", "snr", "min-snr"}, "Per-sample loss weighting.").flag("diffusion-loss-weighting"),
      F("diffusion.min_snr_gamma", 5.0, "Gamma of min-snr weighting.").range(0.0, std::nullopt),
      C("diffusion.timestep_sampling", "logit-normal", {"uniform", "logit-normal", "mode"}, "How training timesteps are drawn."),
      F("diffusion.logit_mean", 0.0, "Mean of logit-normal timestep sampling."),
      F("diffusion.logit_std", 1.0, "Standard deviation of logit-normal timestep sampling.").range(0.0, std::nullopt),
      F("diffusion.mode_scale", 1.29, "Scale of mode timestep sampling."),

      // [sync]
      I("sync.islands", 1, "Learner islands of the run: `yeto-host train` starts this many in embedded local mode, the data is split into this many shards, and the syncer waits for this many to join (within sync.join_timeout_s of its start) before islands that reached their step budget end the run.").range(1, 1024),
      I("sync.fragments", 1, "Fragments the trainable tensors are split into; each syncs on its own schedule.").flag("fragments").range(1, 65536),
      C("sync.fragment_pattern", "binpack", {"binpack", "strided"}, "How tensors are laid out into fragments.").flag("fragment-pattern"),
      I("sync.inner_steps", 64, "Inner optimizer steps per fragment between pushes (H).").range(1, std::nullopt),
      F("sync.alpha", 1.0, "Blend factor of the merged global fragment into the local weights.").range(0.0, 1.0),
      B("sync.carry", true, "Keep each island's own progress across merges: a new global fragment becomes the global state plus what the island trained that it does not count yet (the steps between the island's push and the merge's arrival are kept, not overwritten); one push per fragment is outstanding at a time. sync.alpha is then not used. false: a new global fragment overwrites (or, with sync.alpha < 1, is blended into) the local one."),
      I("sync.quant_block", 64, "Values per float32 scale of the quantised pushes (learners) and downlink updates (syncer): 4 + 32/block bits per value with q4, 2 + 32/block with q2.").range(8, 65536),
      C("sync.uplink", "q4", {"q4", "q2"}, "How a learner's pushes travel: q4, 4-bit codes with a scale per sync.quant_block values; q2, 2-bit codes (levels ±rms/2, ±3 rms/2 per block), half the bytes at a coarser code. Either way what the code drops goes with the next push (error feedback)."),
      C("sync.downlink", "q4", {"q4", "q2", "f32"}, "What the syncer sends every learner after a merge: q4, a 4-bit update of the public state all learners hold, with the quantisation error carried into the next update (about 1/7 of f32); q2, the same with 2-bit codes (about 1/14); f32, the exact float32 fragment. Either way every learner holds the same bytes and the final cut is exact."),
      C("sync.partial_merge", "share", {"share", "full"}, "What a round's pushes weigh when a live island is missing from it (late, or already past the round): share, each push its island's share of the whole round, so a split round adds up to the round's mean (a lone push of two live islands moves the state half its length); full, the pushes present are the whole round, so each part of a split round takes a full step. Learners that are not live, or have never pushed, have no share."),
      C("sync.merge", "mean", {"mean", "rda"}, "How the syncer merges a round's pushes, each weighted by the samples it covers: mean, their weighted mean (what the islands disagree on, their batches' noise, averages out as in one synchronous step on their pooled batches); rda, radial-directional averaging (the mean's direction with the pushes' mean length: the mean scaled by 1 / agreement, up to the square root of the pushes for uncorrelated ones), which amplifies that noise (docs/BENCHMARKS.md). Every merge record on the tape has the round's agreement, |mean| / mean |push|."),
      F("sync.outer_lr", 1.0, "Outer (syncer) learning rate. 1 with outer_momentum 0 and sync.merge = mean is plain averaging of the islands' updates; DiLoCo's pretraining setting is 0.7 with momentum 0.9, which overshot in LoRA fine-tuning of a few outer steps (docs/BENCHMARKS.md).").range(0.0, std::nullopt),
      F("sync.outer_momentum", 0.0, "Outer Nesterov momentum (0: none).").range(0.0, 1.0),
      S("sync.syncer", "", "HOST:PORT of the syncer for `yeto-host learner`."),
      P("sync.run_secret_file", "", "File holding the run secret used to authenticate learners and syncer."),
      S("sync.run_id", "yeto", "Run name; frames of another run are refused before anything else is read (the syncer and its learners must agree)."),
      I("sync.quorum", 1, "Minimum quorum: pushes a fragment round needs before it may merge (capped at the number of live learners).").range(1, 1024),
      F("sync.heartbeat_s", 1.0, "Learner heartbeat interval. Timeout hierarchy: heartbeat_s < learner_timeout_s < grace_max_s < round_deadline_s < reconnect_budget_s.").range(0.001, std::nullopt),
      F("sync.learner_timeout_s", 5.0, "A learner silent this long is no longer live: it leaves the quorum until it reconnects.").range(0.001, std::nullopt),
      F("sync.grace_min_s", 0.0, "Every round that has its quorum waits at least this long after its first push.").range(0.0, std::nullopt),
      F("sync.grace_max_s", 300.0, "Grace ceiling: no push waits in a round longer than this for learners that have not pushed (the bound is grace_fraction of the push period up to this; until a learner's period is known, this).").range(0.001, std::nullopt),
      F("sync.grace_factor", 3.0, "A round waits for a learner that has not pushed until its expected arrival (its last push of the fragment plus its push period, measured) plus grace_factor x how far its arrivals have been from that prediction (at least a tenth of its period).").range(0.0, std::nullopt),
      F("sync.grace_fraction", 1.5, "A push waits in its round at most this fraction of its learner's push period (H inner steps, measured), clamped to [grace_min_s, grace_max_s]; a learner not expected within that is not waited for. Above one half, two islands at equal speed are merged together whatever the phase between them; above 1 (with sync.carry, whose islands train on while their push waits and push their next once it has merged), so are islands whose speeds differ by up to this factor: the faster one's pushes then cover more inner steps instead of being merged alone. With sync.carry = false the default is 0.6 and the value must stay below 1.").range(0.01, 4.0).default_when("sync.carry", false, 0.6),
      F("sync.round_deadline_s", 400.0, "A fragment round that has not reached its quorum this long after its first push merges what it has.").range(0.001, std::nullopt),
      F("sync.reconnect_budget_s", 600.0, "How long a learner keeps reconnecting (with backoff) before it gives up on the syncer.").range(0.001, std::nullopt),
      F("sync.join_timeout_s", 60.0, "How long a learner waits at start-up for the run's global state; after that it trains on its local weights and is overwritten when the state arrives. The syncer waits as long after its start for the sync.islands it expects, and as long after it lost a learner (timed out or disconnected, not left) before the learners that are done end the run without it.").range(0.0, std::nullopt),
      I("sync.island_restarts", 3, "Embedded local mode (`train --islands N`): how many times the launcher restarts an island that exits non-zero or is killed while the run goes on (after 1 s, then twice as long each time, at most 30 s). The island resumes from its own checkpoint and rejoins; the syncer holds the learners-done final cut up to sync.join_timeout_s for an island it lost. 0: never restart.").range(0, 100),
      F("sync.final_timeout_s", 10.0, "How long the syncer waits for learners to acknowledge the final cut.").range(0.001, std::nullopt),
      I("sync.max_staleness", 8, "Pushes whose base version is more than this many merges behind are refused (the learner resyncs).").range(0, std::nullopt),
      B("sync.heloco", true, "Correct stale pseudo-gradients against the outer momentum (HeLoCo) before merging."),
      I("sync.heloco_block", 256, "Block size of the HeLoCo alignment test.").range(1, std::nullopt),
      I("sync.checkpoint_every", 1, "Write the syncer checkpoint every N merges (and always at the end).").range(1, std::nullopt),
      I("sync.max_frame_mb", 1024, "Largest accepted protocol frame, in MiB (fragments, pushes, the initial state).").range(1, 4095),
      I("sync.max_pending_peers", 64, "Connections that have not authenticated yet that the syncer holds at once; the oldest is dropped to make room for a new one. Capped further by what the file-descriptor limit leaves after the syncer's own files and the expected learners.").range(1, 65536),
      I("sync.max_pending_per_address", 16, "Unauthenticated connections held at once from one source address (the oldest of that address is dropped to make room).").range(1, 65536),
      F("sync.accept_rate", 1000.0, "New connections the syncer accepts per second (burst of one second's worth); more wait in the kernel's backlog.").range(1.0, std::nullopt),
      I("sync.reject_log_burst", 20, "Refused unauthenticated peers logged and taped one by one per 10 s; the rest go into one summary line and `reject_summary` record per 10 s.").range(0, std::nullopt),
      F("sync.tape_max_mb", 256.0, "Rotate the event tape at a checkpoint once it exceeds this size in MiB (tape.jsonl -> tape.1.jsonl ...; the new tape starts with every fragment's version); 0: never.").range(0.0, std::nullopt),
      I("sync.tape_keep", 4, "Rotated event tapes kept (tape.1.jsonl is the newest).").range(1, 1000),
      I("sync.worker_threads", 0, "Syncer worker threads for merges and for sealing and opening bulk frames, off the thread that serves the connections; 0: one per core.").range(0, 1024),
      I("sync.offload_kb", 1024, "Merges of fragments, and frames, of at least this many KiB run on the syncer's worker threads; smaller ones on its I/O thread (0: everything on the workers).").range(0, std::nullopt),
      I("sync.bulk_nice", 10, "Nice steps the syncer's bulk threads (large merges, sealing and opening bulk frames, large fragments' checkpoint files) run below its I/O thread, so they use the cores the latency-critical work leaves (Linux, per thread, needs no privilege; elsewhere ignored); 0: same priority. `train --islands` starts its syncer with 0 unless this key is set.").range(0, 19),
      I("sync.budget_outer_steps", 0, "Budget: stop after this many merges (outer steps, all fragments together); 0: no limit.").range(0, std::nullopt),
      I("sync.budget_samples", 0, "Budget: stop once merged pushes cover this many samples; 0: no limit.").range(0, std::nullopt),
      F("sync.budget_seconds", 0.0, "Budget: stop after this much wall time; 0: no limit.").range(0.0, std::nullopt),

      // [log]
      C("log.level", "info", kLogLevels, "Console log level.").flag("log-level"),
      C("log.file_level", "debug", kLogLevels, "Level of the rotating log file in the run directory."),
      P("log.file", "", "Log file; empty: RUN_DIR/yeto.log for runs, none for other commands."),
      I("log.max_file_mb", 16, "Rotate the log file at this size.").range(1, 65536),
      I("log.max_files", 3, "Rotated log files kept.").range(1, 1000),
      B("log.tensorboard", true, "Also write TensorBoard event files into the run directory."),

      // [launch]
      C("launch.engine", "slurm", {"slurm", "skypilot", "kubernetes"}, "`yeto-host launch`: the engine that runs the syncer and the islands (--engine)."),
      L("launch.islands", {}, "`yeto-host launch`: one island per entry, cloud:[nodes x]<count>x<gpu>[@region] (e.g. aws:8xH100, gcp:2x8xA100-80GB@us-central1, slurm:4xcpu); --gpu entries replace the list."),
      I("launch.syncer_port", 0, "Port the syncer job listens on; 0: any free port on Slurm (published to the islands through the run directory), 29400 on SkyPilot and Kubernetes.").range(0, 65535),
      S("launch.syncer_host", "", "Slurm: the address islands use to reach the syncer's node; empty: the node's hostname."),
      S("launch.host_bin", "", "yeto-host as the jobs find it; empty: this program's path on Slurm (a shared file system), `yeto-host` on the PATH elsewhere."),
      S("launch.setup", "", "Shell lines every job runs before yeto-host (module load, environment)."),
      S("launch.time_limit", "", "Slurm --time of every job; empty: the partition's default."),
      S("launch.account", "", "Slurm --account; empty: the user's default."),
      B("launch.spot", true, "SkyPilot: islands run as managed jobs on spot capacity and are recovered after a preemption (false: on-demand clusters). The syncer always runs on demand."),
      I("launch.island_restarts", 3, "SkyPilot and Kubernetes: how many times the engine restarts an island job that failed (Slurm requeues preempted jobs itself).").range(0, 100),
      F("launch.syncer_wait_s", 600.0, "Slurm: how long an island job waits for the syncer job to publish its address before it fails.").range(1.0, 86400.0),
      S("launch.image", "", "Kubernetes: the container image holding yeto-host (required there)."),
      S("launch.namespace", "default", "Kubernetes namespace of the run's objects."),
      S("launch.queue", "", "Kubernetes: a Kueue LocalQueue; the Jobs get its queue-name label and start suspended until admitted."),
      S("launch.volume_claim", "", "Kubernetes: a PersistentVolumeClaim holding data/ and model/ and the run directory, mounted at launch.mount."),
      S("launch.mount", "/yeto", "SkyPilot and Kubernetes: where jobs see the config, data/, model/ and run/."),
      S("launch.syncer_cloud", "", "SkyPilot: infra of the syncer task (e.g. aws/us-east-1); empty: wherever SkyPilot finds capacity."),

      // [alphafold3]
      B("alphafold3.accept_model_parameter_terms", false, "The AlphaFold 3 guard samples only when this is true: you received the AlphaFold 3 model parameters directly from Google and accept their terms of use (WEIGHTS_TERMS_OF_USE.md of google-deepmind/alphafold3: non-commercial use only, no training of other models on the outputs, the parameters used only as received from Google and never redistributed). Yeto never downloads, packages or copies the parameters; their folder is $YETO_ALPHAFOLD3_MODEL_PARAMETERS_DIR."),
      S("alphafold3.python", "python3", "The Python interpreter that runs AlphaFold 3's run_alphafold.py (the one of its virtual environment or container; a name is looked up on the PATH)."),
      L("alphafold3.args", {}, "Flags passed through to run_alphafold.py as given, each --name=value (e.g. --run_data_pipeline=false, --num_diffusion_samples=5, --num_seeds=2, --flash_attention_implementation=xla); --json_path, --input_dir, --model_dir, --db_dir and --output_dir are set by Yeto and refused here."),
  };
  return s;
}

}  // namespace

const std::vector<SectionDef>& sections() {
  static const std::vector<SectionDef> s = {
      {"run", "Where the run writes and what it runs on."},
      {"model", "The model repository and the plugin that serves its family."},
      {"plugins", "Where plugins are found and which signatures are trusted."},
      {"data", "Training rows: sources, columns, media decoding and caching."},
      {"validation", "Held-out evaluation."},
      {"tuning", "What is trained."},
      {"lora", "LoRA adapter shape."},
      {"train", "The inner training loop on one island."},
      {"optimizer", "AdamW and the learning-rate schedule."},
      {"diffusion", "Seed, objective, timestep sampling and loss weighting."},
      {"sync", "Decoupled DiLoCo synchronisation across islands."},
      {"log", "Console and file logging, metrics sinks."},
      {"launch", "Handing the syncer and the islands to Slurm, SkyPilot or Kubernetes (`yeto-host launch`, docs/FLEET.md)."},
      {"alphafold3", "The AlphaFold 3 guard: sampling through the official run_alphafold.py, never training (docs/MODELS.md)."},
  };
  return s;
}

const std::vector<KeyDef>& schema() {
  static const std::vector<KeyDef> s = build_schema();
  return s;
}

const std::vector<RenamedKey>& renamed_keys() {
  static const std::vector<RenamedKey> r = {
      {"train.learning_rate", "optimizer.learning_rate", ""},
      {"train.lr", "optimizer.learning_rate", ""},
      {"train.batch_size", "train.micro_batch_size", "the effective batch is micro_batch_size x gradient_accumulation"},
      {"train.seed", "diffusion.seed", ""},
      {"lora.rank", "lora.r", ""},
      {"lora.target_modules", "lora.targets", ""},
      {"data.resolution", "data.height", "set data.width as well"},
      {"data.caption_column", "data.prompt_column", ""},
      {"sync.num_fragments", "sync.fragments", ""},
      {"model.name", "model.id", ""},
      {"model.diffusion_adapter", "model.adapter", ""},
  };
  return r;
}

const KeyDef* find_key(std::string_view key) {
  for (const auto& d : schema())
    if (d.key == key) return &d;
  return nullptr;
}

const KeyDef* find_flag(std::string_view flag) {
  for (const auto& d : schema())
    if (!d.flag.empty() && d.flag == flag) return &d;
  return nullptr;
}

const RenamedKey* find_renamed(std::string_view old_key) {
  for (const auto& r : renamed_keys())
    if (r.old_key == old_key) return &r;
  return nullptr;
}

bool is_section(std::string_view name) {
  for (const auto& s : sections())
    if (s.name == name) return true;
  return false;
}

std::vector<std::string> all_keys() {
  std::vector<std::string> out;
  for (const auto& d : schema()) out.push_back(d.key);
  return out;
}

std::vector<std::string> all_flags() {
  std::vector<std::string> out;
  for (const auto& d : schema())
    if (!d.flag.empty()) out.push_back("--" + d.flag);
  return out;
}

namespace {

std::string number_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Use the shortest text that reads back to the same double.
  for (int prec = 1; prec <= 17; ++prec) {
    char shorter[64];
    std::snprintf(shorter, sizeof shorter, "%.*g", prec, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string range_text(const KeyDef& d) {
  if (!d.min && !d.max) return {};
  auto fmt = [&](double v) {
    return d.type == Type::number ? number_text(v) : std::to_string(static_cast<long long>(v));
  };
  if (d.min && d.max) return fmt(*d.min) + " .. " + fmt(*d.max);
  if (d.min) return ">= " + fmt(*d.min);
  return "<= " + fmt(*d.max);
}

}  // namespace

std::string describe_type(const KeyDef& d) {
  switch (d.type) {
    case Type::boolean: return "a boolean (true or false)";
    case Type::integer: return "an integer";
    case Type::number: return "a number";
    case Type::string: return "a string";
    case Type::path: return "a path (string)";
    case Type::choice: return "one of: " + join(d.choices, ", ");
    case Type::string_list: return "an array of strings";
    case Type::integer_or_auto: return "an integer or \"auto\"";
  }
  return "a value";
}

std::string default_text(const KeyDef& d, bool markdown) {
  const auto code = [&](const std::string& t) { return markdown ? "`" + t + "`" : t; };
  std::string s = code(to_toml_literal(d.default_value));
  for (const auto& w : d.default_when)
    s += " (" + code(to_toml_literal(w.value)) + " where " + code(w.when) + " = " + code(to_toml_literal(w.equals)) + ")";
  return s;
}

std::string to_toml_literal(const Value& v) {
  struct Visitor {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return number_text(d); }
    std::string operator()(const std::string& s) const { return quote(s); }
    std::string operator()(const std::vector<std::string>& l) const {
      std::vector<std::string> q;
      for (const auto& s : l) q.push_back(quote(s));
      return "[" + join(q, ", ") + "]";
    }
  };
  return std::visit(Visitor{}, v);
}

std::string reference_markdown() {
  std::ostringstream md;
  md << "# Run configuration reference\n\n"
     << "Generated from the schema in `host/config/schema.cpp` by `yeto-host config --keys "
        "--markdown`; a test keeps this file in sync.\n\n"
     << "Every key can be set in the run file (`[section]` then `key = value`), with "
        "`--set section.key=value`, or with its long flag where it has one. Later sources "
        "win: default < file < flags (in command-line order). Unknown keys are errors.\n\n";
  for (const auto& sec : sections()) {
    md << "## [" << sec.name << "]\n\n" << sec.doc << "\n\n";
    md << "| key | type | default | flag | description |\n|---|---|---|---|---|\n";
    for (const auto& d : schema()) {
      if (d.section() != sec.name) continue;
      std::string type = describe_type(d);
      const std::string range = range_text(d);
      if (!range.empty()) type += " (" + range + ")";
      md << "| `" << d.key << "` | " << type << " | " << default_text(d, true) << " | " << (d.flag.empty() ? std::string("") : "`--" + d.flag + "`") << " | "
         << d.doc << " |\n";
    }
    md << "\n";
  }
  md << "## Renamed keys\n\nThese names are refused with the new name to use.\n\n"
     << "| old | new | note |\n|---|---|---|\n";
  for (const auto& r : renamed_keys())
    md << "| `" << r.old_key << "` | `" << r.new_key << "` | " << r.note << " |\n";
  return md.str();
}

}  // namespace yeto::config
