"""Images made fit for a model: decoded with Pillow, turned upright, downscaled and re-encoded.

Anthropic advises a long edge of at most 1568 px (larger images are scaled down by the API
anyway, at the sender's cost in latency) and refuses images over 5 MB; OpenAI-compatible
servers have similar limits. Re-encoding also drops EXIF (GPS positions) and turns whatever the
phone sent (WebP, GIF, a huge PNG) into JPEG, or PNG when the image has transparency. Pillow's
work is CPU-bound: callers run `fit_image` in a thread.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

# The only formats Pillow may try. Left to itself, Pillow tries each of its 40-odd decoders on
# whatever bytes arrive, whatever the file is called: EPS would run Ghostscript (a PostScript
# interpreter) on a stranger's file, and rarely used decoders are where the bugs are. Phones and
# chat apps send these four; an MPO (a camera's multi-picture JPEG) opens through JPEG's.
FORMATS = ("JPEG", "PNG", "GIF", "WEBP")

# Decoded pixels above this are refused rather than decoded (a "decompression bomb": a small
# file that expands to gigabytes).
MAX_PIXELS = 60_000_000


class ImageProblem(Exception):
    """The file is not an image Bruce can read; the message says why, for the user."""


@dataclass(frozen=True, slots=True)
class FittedImage:
    data: bytes
    media_type: str
    width: int
    height: int


def fit_image(data: bytes, max_edge: int, max_bytes: int) -> FittedImage:
    """`data` as JPEG/PNG with its long edge at most `max_edge` px and at most `max_bytes`."""
    # Pillow is imported on the first picture (in the worker thread this runs in), not at
    # start-up: most processes never see one.
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)
            if image.width * image.height > MAX_PIXELS:
                raise ImageProblem(
                    f"the picture is too large ({image.width}×{image.height} pixels; at most "
                    f"{MAX_PIXELS // 1_000_000} megapixels)"
                )
            image.load()
    except ImageProblem:
        raise
    except UnidentifiedImageError:
        log.info("image_refused", bytes=len(data), starts=data[:8].hex())
        raise ImageProblem(
            "it is not a JPEG, PNG, GIF or WebP picture, the only kinds I open; please send "
            "it as one of those (a screenshot of it works)"
        ) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageProblem(
            f"the picture is too large (at most {MAX_PIXELS // 1_000_000} megapixels)"
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageProblem(f"the picture is damaged ({exc})") from None
    upright: Image.Image = ImageOps.exif_transpose(image)  # phones store "rotate me" in EXIF
    keeps_alpha = upright.mode in ("RGBA", "LA", "PA") or "transparency" in upright.info
    upright = upright.convert("RGBA" if keeps_alpha else "RGB")
    edge, quality = max_edge, 85
    while True:
        scaled = upright.copy()
        scaled.thumbnail((edge, edge), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        if keeps_alpha:
            scaled.save(out, "PNG", optimize=True)
        else:
            scaled.save(out, "JPEG", quality=quality, optimize=True)
        if out.tell() <= max_bytes or edge <= 256:
            break
        # Too heavy still: a lower JPEG quality first, then fewer pixels.
        if not keeps_alpha and quality > 60:
            quality -= 15
        else:
            edge = int(edge * 0.75)
    return FittedImage(
        out.getvalue(), "image/png" if keeps_alpha else "image/jpeg", scaled.width, scaled.height
    )
