"""A script that prints the way training scripts do: a progress bar redrawn
with carriage returns (one endless line), many short log lines from a logger on
stderr, a line past any buffer, bytes that are not UTF-8, and a last line with
no newline before it exits."""

import logging
import os
import sys

LINES = int(os.environ.get("CHATTY_LINES", "50000"))


def main() -> None:
    rank = int(os.environ["RANK"])
    for step in range(2000):
        sys.stdout.write(f"\rtrain: {step / 20:5.1f}%|{'#' * (step // 100):20s}| {step}/2000 [loss=0.{step:04d}]")
    sys.stdout.write("\n")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    log = logging.getLogger("train")
    for i in range(LINES):
        log.info("rank %d step %d loss %.4f", rank, i, 1.0 / (i + 1))
    print("x" * 3_000_000)
    sys.stdout.buffer.write(b"bad bytes \xff\xfe\x80 end\n")
    sys.stdout.flush()
    sys.stdout.write(f"chatty rank {rank} done, no newline")


if __name__ == "__main__":
    main()
