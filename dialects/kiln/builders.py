"""One builder function per kiln op: ``builders.add(a, b)``, ``builders.conv2d(x, w, b, attrs={...})``.

Each is :func:`kiln.dialects.kiln.create_op` bound to its op class, so
result types are inferred by the op's shape function.  Attribute keywords are
accepted directly too: ``builders.softmax(x, axis=-1)``.
"""

from __future__ import annotations

from . import OPS, create_op


def _builder(cls):
    def build(*operands, attrs=None, results=None, loc=None, ip=None, **kw):
        attrs = dict(attrs or {})
        named = {}
        for key, value in kw.items():
            (attrs if key in cls.ATTRS else named)[key] = value
        return create_op(cls, operands, attrs=attrs, results=results, loc=loc, ip=ip, **named)

    build.__name__ = cls.OPERATION_NAME.split(".", 1)[1]
    build.__doc__ = f"Build ``{cls.OPERATION_NAME}``.\n\n{cls.__doc__ or ''}"
    return build


__all__ = []
for _name, _cls in OPS.items():
    _short = _name.split(".", 1)[1]
    globals()[_short] = _builder(_cls)
    __all__.append(_short)
