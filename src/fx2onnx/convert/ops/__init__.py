"""Built-in converters, one module per family; importing this package registers them all."""

from . import (  # noqa: F401
    activation,
    backward,
    control_flow,
    creation,
    elementwise,
    indexing,
    loss,
    nn,
    reduction,
    resample,
    shape,
    symbolic,
    vision,
    wrap,
)
