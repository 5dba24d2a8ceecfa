"""`tessera.parser.TesseraParser`, the path the README documents: the parser lives in `tessera.ir.parser`."""

from tessera.ir.parser import OPAQUE_DIALECTS, TesseraParser

__all__ = ["OPAQUE_DIALECTS", "TesseraParser"]
