#!/usr/bin/env python3
"""Writes tests/fixtures/audio/ltx2-log-mel.safetensors: LTX-2's waveform -> log-mel front end as
ltx-core's AudioProcessor computes it (torchaudio.transforms.MelSpectrogram at 16 kHz, n_fft 1024,
win 1024, hop 160, 64 mels over 0..8000 Hz, periodic Hann window, centred frames with reflect
padding, power 1, Slaney mel scale and Slaney normalisation; then log(clamp(., 1e-5)) and
[B, C, mels, T] -> [B, C, T, mels]), on deterministic stereo test signals.

Run with Debian's python3-torchaudio (0.13.1, PyTorch 1.13.1), i.e. /usr/bin/python3:
    /usr/bin/python3 scripts/make_ltx2_log_mel_fixture.py tests/fixtures/audio/ltx2-log-mel.safetensors
"""
import json
import math
import struct
import sys

import torch
import torchaudio


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        data = t.numpy().tobytes()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt", "source": "torchaudio " + torchaudio.__version__ + ", torch " +
                              torch.__version__}
    text = json.dumps(header, sort_keys=True).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main(out):
    sr = 16000
    mel = torchaudio.transforms.MelSpectrogram(sample_rate=sr, n_fft=1024, win_length=1024, hop_length=160,
                                               f_min=0.0, f_max=sr / 2.0, n_mels=64, window_fn=torch.hann_window,
                                               center=True, pad_mode="reflect", power=1.0, mel_scale="slaney",
                                               norm="slaney")
    g = torch.Generator().manual_seed(20)
    n = 4000  # 0.25 s: 26 frames
    t = torch.arange(n, dtype=torch.float64) / sr
    left = 0.5 * torch.sin(2 * math.pi * 440.0 * t) + 0.25 * torch.sin(2 * math.pi * 3150.0 * t)
    right = 0.3 * torch.sin(2 * math.pi * 220.0 * t) * (t < 0.12).double()  # a tone that stops
    wave = torch.stack([left, right]).float()
    noise = 0.2 * torch.randn(2, n, generator=g)
    waveform = torch.stack([wave, noise])  # [2, 2, n]: a tone pair, then noise
    log_mel = torch.log(torch.clamp(mel(waveform), min=1e-5)).permute(0, 1, 3, 2).contiguous()
    save_safetensors(out, {"waveform": waveform, "log_mel": log_mel, "mel_filters": mel.mel_scale.fb.contiguous()})


if __name__ == "__main__":
    main(sys.argv[1])
