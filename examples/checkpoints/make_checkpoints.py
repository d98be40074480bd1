"""Save two ResNet-18 checkpoints as their libraries save them: timm's (.safetensors) and torchvision's
(.pth), for docs/tutorial-checkpoints.md.

    python examples/checkpoints/make_checkpoints.py [--out runs/tutorial] [--pretrained]

Without --pretrained (this machine has no hub access), each is its library's random initialisation
(seeded): timm's ResNet starts each residual block's last batch norm at zero (`zero_init_last`),
torchvision's does not, so the two start from different features. With --pretrained, on a machine
that can download them, the same files hold the libraries' published ImageNet weights
(timm `resnet18.a1_in1k`, torchvision `ResNet18_Weights.IMAGENET1K_V1`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import timm
import torch
import torchvision
from safetensors.torch import save_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/tutorial"))
    parser.add_argument("--pretrained", action="store_true", help="the libraries' published weights (downloads)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    timm_model = timm.create_model("resnet18.a1_in1k" if args.pretrained else "resnet18", pretrained=args.pretrained)
    save_file(timm_model.state_dict(), str(args.out / "timm-resnet18.safetensors"))

    torch.manual_seed(0)
    weights = torchvision.models.ResNet18_Weights.IMAGENET1K_V1 if args.pretrained else None
    torch.save(torchvision.models.resnet18(weights=weights).state_dict(), args.out / "tv-resnet18.pth")
    print(f"wrote {args.out / 'timm-resnet18.safetensors'} and {args.out / 'tv-resnet18.pth'}")


if __name__ == "__main__":
    main()
