"""Long public-domain English texts from Debian packages.

- `austen-<book>` (e.g. `austen-emma`, `austen-prideprejudice`): Jane Austen's novels
  from Debian's `r-cran-janeaustenr` (R lazy-load database, read with the PyPI `rdata`
  package; Project Gutenberg texts, public domain).
- `kjv`: the King James Bible from Debian's `bible-kjv-text`, decoded by the same
  package family's `bible` program (Debian `bible-kjv`), whole book Genesis..Revelation.
"""
import gzip
import os
import re
import shutil
import struct
import subprocess
import warnings
import zlib

from smollm import MissingInput

AUSTEN_DIR = "/usr/lib/R/site-library/janeaustenr/data"
AUSTEN_BOOKS = ("emma", "mansfieldpark", "northangerabbey", "persuasion",
                "prideprejudice", "sensesensibility")
KJV_DATA = "/usr/lib/bible.data"


def _austen(book):
    if book not in AUSTEN_BOOKS:
        raise ValueError(f"unknown Austen book {book!r}; one of {', '.join(AUSTEN_BOOKS)}")
    rdx = os.path.join(AUSTEN_DIR, "Rdata.rdx")
    rdb = os.path.join(AUSTEN_DIR, "Rdata.rdb")
    if not (os.path.isfile(rdx) and os.path.isfile(rdb)):
        raise MissingInput("text package missing: Debian's r-cran-janeaustenr is not "
                           "installed; run: apt-get install r-cran-janeaustenr")
    try:
        import rdata
    except ImportError as e:
        raise MissingInput("PyPI package 'rdata' missing (pip install -r "
                           "tools/captures/requirements.txt)") from e
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rdata warns that a bare stream "is assumed RDS"
        index = rdata.conversion.convert(rdata.parser.parse_data(
            gzip.decompress(open(rdx, "rb").read())))
        off, length = (int(x) for x in index["variables"][book])
        with open(rdb, "rb") as f:
            f.seek(off)
            blob = f.read(length)
        # each lazy-load record: 4-byte big-endian inflated length, then a zlib stream
        n = struct.unpack(">I", blob[:4])[0]
        raw = zlib.decompress(blob[4:])
        if len(raw) != n:
            raise RuntimeError(f"janeaustenr record for {book} is corrupt")
        lines = rdata.conversion.convert(rdata.parser.parse_data(raw))
    return "\n".join(str(x) for x in lines)


def _kjv():
    exe = shutil.which("bible")
    if exe is None or not os.path.isfile(KJV_DATA):
        raise MissingInput("text package missing: Debian's bible-kjv / bible-kjv-text are "
                           "not installed; run: apt-get install bible-kjv")
    out = subprocess.run([exe, "gen1:1-rev22:21"], stdin=subprocess.DEVNULL,
                         capture_output=True, check=True, env=dict(os.environ, COLUMNS="80"))
    txt = out.stdout.decode("utf-8", "replace")
    # drop verse numbers at line starts ("  12 And ...") to leave running prose
    return re.sub(r"(?m)^\s+\d+ ", "", txt)


def load_text(name):
    """Full text of `name` ('kjv' or 'austen-<book>'), a str."""
    if name == "kjv":
        return _kjv()
    if name.startswith("austen-"):
        return _austen(name[len("austen-"):])
    raise ValueError(f"unknown text {name!r}: 'kjv' or 'austen-<book>'")


def text_source(name):
    """Provenance string for the capture metadata."""
    if name == "kjv":
        return "King James Bible, Debian bible-kjv-text 4.38 (decoded by bible-kjv), public domain"
    return (f"Jane Austen, {name[len('austen-'):]}, Debian r-cran-janeaustenr 1.0.0 "
            "(Project Gutenberg text), public domain")
