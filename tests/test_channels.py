"""Channels as users of timm and torchvision expect them: a 3-channel checkpoint given as `init` on grey
Fashion-MNIST gets a 3-channel model and the images replicated (benchbench.plan.shape); reducing its
first convolution to one channel happens only when asked (`benchbench convert --in-chans 1`, summed as
timm's `adapt_input_conv`); and every fix a mismatch names is a command line that works."""

from __future__ import annotations

import re
import shlex

import numpy as np
import pytest
import torch

from benchbench.weights.checkpoints import adapt_input_conv, checkpoint_in_chans, input_channel_keys, load_weights
from benchbench.cli import main
from benchbench.errors import BenchError
from benchbench.plan.cell import make_cell
from benchbench.plan.shape import cell_shape
from benchbench.settings import resolve

timm = pytest.importorskip("timm")


def _timm_checkpoint(path, name="vit_tiny_patch16_224", in_chans=3, **kw):
    """A timm model (random weights, a non-zero head) saved as timm saves one: its own names, safetensors."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10, in_chans=in_chans, **kw)
    torch.nn.init.normal_(model.get_classifier().weight, std=0.5)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return model.eval()


def _cell(catalog, model, protocol="evaluate", **settings):
    spec = catalog.protocols.get(protocol)
    return make_cell(spec, model, "fashion-mnist", 0, resolve(spec, settings, protocol))


def test_a_model_takes_its_checkpoints_channels(catalog, tmp_path):
    """vit-ti16 and timm/<name> have no fixed channels: a 3-channel checkpoint makes them 3-channel on grey
    data; a model of fixed channels (timm's tag, torchvision) and a cell without a file keep theirs."""
    ckpt = tmp_path / "vit_tiny.safetensors"
    _timm_checkpoint(ckpt, img_size=32)
    for model in ("vit-ti16", "timm/vit_tiny_patch16_224"):
        assert cell_shape(_cell(catalog, model, init=str(ckpt), resolution=32), catalog)["in_chans"] == 3, model
    assert cell_shape(_cell(catalog, "vit-ti16", "scratch", resolution=32), catalog)["in_chans"] == 1
    assert cell_shape(_cell(catalog, "vit-ti16", "finetune", init="run:fashion-mnist", resolution=32),
                      catalog)["in_chans"] == 1  # written by the run itself, on the dataset's channels
    grey = tmp_path / "grey.safetensors"
    _timm_checkpoint(grey, in_chans=1, img_size=32)
    assert checkpoint_in_chans(grey, catalog.models.get("vit-ti16"), num_classes=10, image_size=32) == 1
    assert input_channel_keys(catalog.models.get("vit-ti16"), num_classes=10, image_size=32) == \
        {"patch_embed.weight": (1, 1, 0)}


def test_grey_fashion_mnist_into_a_3_channel_checkpoint_scores_as_timm(run_suite, tmp_path):
    """Before: `patch_embed.weight: checkpoint [192, 3, 16, 16], model [192, 1, 16, 16]`. Now each image's
    top-1 is timm's own model's on the same images replicated to 3 channels."""
    ckpt = tmp_path / "vit_tiny.safetensors"
    reference = _timm_checkpoint(ckpt, img_size=32)
    run_suite.write(f"""
        [suite]
        name = "rgb"
        models = ["vit-ti16"]
        datasets = ["fashion-mnist"]
        protocols = ["evaluate"]
        [settings.evaluate]
        init = "{ckpt}"
        resolution = 32
    """)
    assert run_suite.run() == 0
    (record,) = run_suite.records()
    assert record.ok and record.metrics["params"] == sum(p.numel() for p in reference.parameters())
    from benchbench.store import predictions
    from benchbench.specs import DataOptions
    from benchbench_plugins.datasets import fashion_mnist

    preds = predictions.load(run_suite.run_dir, record.predictions, record.key)
    test = fashion_mnist.load("test", DataOptions(root=run_suite.data, image_size=32, in_chans=3))
    with torch.no_grad():
        theirs = reference(test.apply(test.tensors[0][torch.from_numpy(preds.index.astype(np.int64))])).argmax(1).numpy()
    assert np.array_equal(preds.top5[:, 0], theirs)


def test_convert_in_chans_1_sums_the_first_convolution(catalog, tmp_path, capsys):
    """Only when asked. On images that are the same in every channel (Fashion-MNIST replicated, one mean
    and std), the summed 1-channel model gives the 3-channel model's logits; the file then loads as `init`
    of a grey cell."""
    ckpt = tmp_path / "vit_tiny.safetensors"
    _timm_checkpoint(ckpt, img_size=32)
    out = tmp_path / "grey.safetensors"
    assert main(["convert", "vit-ti16", str(ckpt), "-o", str(out), "--resolution", "32", "--num-classes", "10",
                 "--in-chans", "1"]) == 0
    assert "patch_embed.weight: 3 input channels adapted to 1 (timm's adapt_input_conv: summed)" in \
        capsys.readouterr().err
    spec = catalog.models.get("vit-ti16")
    rgb, grey = (spec.build(num_classes=10, image_size=32, in_chans=c).eval() for c in (3, 1))
    load_weights(rgb, ckpt, spec)
    load_weights(grey, out, spec)
    x = torch.randn(4, 1, 32, 32)
    with torch.no_grad():
        assert torch.allclose(grey(x), rgb(x.expand(-1, 3, -1, -1)), atol=1e-4)
    assert checkpoint_in_chans(out, spec, num_classes=10, image_size=32) == 1


def test_adapt_input_conv_is_timms():
    from timm.models import adapt_input_conv as theirs

    w = torch.randn(8, 3, 5, 5)
    for c in (1, 2, 4, 7):
        assert torch.equal(adapt_input_conv(w, c), theirs(c, w)), c


def _fix_in(message: str) -> list[str]:
    """The first `benchbench convert ...` command a message names, as argv."""
    found = re.search(r"`benchbench (convert [^`]+)`", message)
    assert found, message
    return shlex.split(found.group(1))


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_the_fixes_a_mismatch_names_work(catalog, tmp_path, capsys):
    """A grey checkpoint into torchvision's resnet18 (3 channels, fixed), and a head of other classes: each
    error names a `benchbench convert` command line; run as named (OUT made concrete), it succeeds, and
    its output loads. No hint names the model that just failed as the one to use."""
    from torchvision.models import resnet18

    grey = resnet18(num_classes=10)
    grey.conv1 = torch.nn.Conv2d(1, 64, 7, 2, 3, bias=False)
    torch.save(grey.state_dict(), tmp_path / "grey.pth")
    spec = catalog.models.get("tv/resnet18")
    with pytest.raises(BenchError) as err:
        load_weights(spec.build(num_classes=10, image_size=64, in_chans=3), tmp_path / "grey.pth", spec,
                     candidates=lambda: list(catalog.models))
    message = str(err.value)
    assert "takes 1 input channels, this one 3: tv/resnet18 takes 3 only" in message
    assert "nearest architecture: tv/resnet18" not in message
    argv = [a.replace("OUT.safetensors", str(tmp_path / "rgb.safetensors")) for a in _fix_in(message.split(
        "; or adapt the checkpoint")[1])]
    assert argv[:2] == ["convert", "tv/resnet18"] and "--in-chans" in argv
    assert main([*argv, "--num-classes", "10"]) == 0
    load_weights(spec.build(num_classes=10, image_size=64, in_chans=3), tmp_path / "rgb.safetensors", spec)

    assert main(["convert", "tv/resnet18", str(tmp_path / "rgb.safetensors"), "-o", str(tmp_path / "x.pt")]) == 2
    message = capsys.readouterr().err
    assert "only the classification head differs" in message
    argv = [a.replace("OUT.safetensors", str(tmp_path / "ten.safetensors")) for a in _fix_in(message)]
    assert "--num-classes" in argv and main(argv) == 0
