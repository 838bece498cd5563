"""OpenVINO as the optimizer writes its IR and the runtime reads it: the model file's name in the IR folder."""

from __future__ import annotations

IR_NAME = "model.xml"
