"""torch's export of a network for training, as the tests write their ONNX graphs: training mode,
batch norm kept (no constant folding), the legacy exporter (``dynamo=False``), opset 17."""

from __future__ import annotations

import io
import warnings


def training_export(model, example, *, input_name: str | None = None, output_name: str | None = None,
                    dynamic: dict[int, str] | None = None, opset: int = 17) -> bytes:
    """The ONNX bytes of ``model`` traced on ``example`` (at ``opset``); ``dynamic`` names the input's dynamic axes
    (``{0: "batch"}``), which the output shares on axis 0 when it is named."""
    import torch

    axes = {}
    if dynamic:
        axes[input_name or "input"] = dynamic
        if output_name:
            axes[output_name] = {0: dynamic[0]} if 0 in dynamic else {}
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.train(), (example,), f, dynamo=False, opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=[input_name or "input"] if input_name or dynamic else None,
                          output_names=[output_name] if output_name else None, dynamic_axes=axes or None)
    return f.getvalue()
