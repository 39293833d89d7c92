"""kiln → linalg on tensors (Dialect Conversion); see :mod:`.convert`."""

from .convert import (  # noqa: F401
    LOWERINGS,
    ConvertKilnToLinalg,
    KilnTypeConverter,
    conversion_target,
    convert_kiln_to_linalg,
    populate_kiln_to_linalg,
)
