"""Write the two stand-in adapters' files: a real PEFT adapter_config.json and a small, valid
safetensors file of rank-8 LoRA matrices (zeros: the local platform's simulated engine reads
no weights, but every byte is signed and verified as a real adapter's would be)."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

RANK, HIDDEN = 8, 64
TARGETS = ("q_proj", "v_proj")


def safetensors(tensors: dict[str, tuple[int, int]]) -> bytes:
    """float16 zero tensors in the safetensors layout: u64 header size, JSON header, data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset, data = 0, b""
    for name, (rows, cols) in tensors.items():
        size = rows * cols * 2
        header[name] = {
            "dtype": "F16",
            "shape": [rows, cols],
            "data_offsets": [offset, offset + size],
        }
        offset += size
        data += bytes(size)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format aligns the data to 8 bytes
    return struct.pack("<Q", len(text)) + text + data


def write(folder: Path, purpose: str) -> None:
    folder.mkdir(exist_ok=True)
    config = {
        "base_model_name_or_path": "llama-3.1-8b-instruct",
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": RANK,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "target_modules": list(TARGETS),
        "bias": "none",
        "purpose": purpose,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    tensors = {}
    for target in TARGETS:
        prefix = f"base_model.model.model.layers.0.self_attn.{target}"
        tensors[f"{prefix}.lora_A.weight"] = (RANK, HIDDEN)
        tensors[f"{prefix}.lora_B.weight"] = (HIDDEN, RANK)
    (folder / "adapter_model.safetensors").write_bytes(safetensors(tensors))


if __name__ == "__main__":
    here = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    write(here / "acme-support", "acme's support tone")
    write(here / "globex-legal", "globex's contract review")
