"""BENCHMARKS.md as sections: cutting it at its '## ' headings, putting
rendered sections in place of theirs (or after the one spliced before, or
before the e2e section), and marking a section a full run kept from an
earlier file as carried over.

May import: e2e (its heading).
"""
import re

from .e2e import E2E_HEADING


# Starts the line a full run puts under each section it carried over (and
# replaces on the next run rather than stacking a second one).
CARRIED = "_Carried over from an earlier BENCHMARKS.md"


def split_sections(text):
    """`text` cut before each '## ' heading: (what precedes the first,
    [(heading, block)]); that part and the blocks, joined, are `text`."""
    head, *blocks = re.split(r"(?m)^(?=## )", text)
    return head, [(b.split("\n", 1)[0].rstrip(), b) for b in blocks]


def join_blocks(head, blocks):
    """head + blocks, one blank line at least between each two, so that a
    block that ended the file (one newline) can be followed."""
    out = head
    for block in blocks:
        if out and not out.endswith("\n\n"):
            out = out.rstrip("\n") + "\n\n"
        out += block
    return out


def splice_sections(text, sections):
    """Put each rendered section (a list of lines starting with its '## '
    heading) into `text`: in place of the section with that heading, else
    after the section spliced before it (rendered order is kept), else
    before the e2e section (else at the end). Untouched sections stay as
    they were, byte for byte."""
    head, blocks = split_sections(text)
    at = None
    for lines in sections:
        block = "\n".join(lines).rstrip("\n") + "\n\n"
        headings = [h for h, _ in blocks]
        if lines[0] in headings:
            at = headings.index(lines[0])
            blocks[at] = (lines[0], block)
            continue
        if at is not None:
            at += 1
        else:
            at = headings.index(E2E_HEADING) if E2E_HEADING in headings else len(blocks)
        blocks.insert(at, (lines[0], block))
    return join_blocks(head, [b for _, b in blocks])


def mark_carried(block, date):
    """A section kept by a full run that did not measure it: a line under
    its heading says so (an earlier run's line is replaced)."""
    heading, _, body = block.partition("\n")
    body = body.lstrip("\n")
    if body.startswith(CARRIED):
        body = body.partition("\n")[2].lstrip("\n")
    return f"{heading}\n\n{CARRIED}: not measured in the run of {date}._\n\n{body}"
