"""Built-in converters, one module per family; importing this package registers them all."""

from . import (  # noqa: F401
    activation,
    backward,
    batch_norm,
    control_flow,
    creation,
    elementwise,
    gamma,
    indexing,
    loss,
    nn,
    random,
    reduction,
    resample,
    selection,
    shape,
    special,
    symbolic,
    views,
    vision,
    wrap,
)
