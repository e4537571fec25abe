#!/usr/bin/env python3
"""Writes Fashion-MNIST (the IDX files of Debian's dataset-fashion-mnist) as an image folder for
data.name = "image_folder" (recipes/fashion_mnist_folder_cnn.toml): one 28x28 gray PNG per
image, standard library only (zlib + struct; no numpy or PIL needed).

  data/make_image_folder.py [--idx /usr/share/datasets/fashion-mnist] [--out DATA_ROOT]
  (DATA_ROOT: the data root of data/genesis_paths.py)
                            [--train 60000] [--test 10000]

Produces OUT/fashion_mnist_png/train/<class>/<index>.png and test/<class>/<index>.png, the
first --train and --test images of each IDX split. The class folders are named "0_tshirt_top"
... "9_ankle_boot", so that their sorted order is the IDX label order; <index> is the image's
index in its IDX file, zero-padded.
"""
import argparse
import gzip
import os
import struct
import zlib

from genesis_paths import data_root  # noqa: E402  beside this script

CLASSES = ["0_tshirt_top", "1_trouser", "2_pullover", "3_dress", "4_coat", "5_sandal", "6_shirt", "7_sneaker",
           "8_bag", "9_ankle_boot"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, kind, dims = struct.unpack(">HBB", data[:4])
    if zero != 0 or kind != 0x08:
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes")
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return shape, data[4 + 4 * dims:]


def chunk(kind, payload):
    body = kind + payload
    return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def png_gray(width, height, pixels):
    """A PNG of 8-bit gray pixels (row by row), each row with filter type 0 (none)."""
    rows = b"".join(b"\x00" + pixels[y * width:(y + 1) * width] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def write_split(idx, prefix, out, count):
    (n, height, width), images = read_idx(os.path.join(idx, f"{prefix}-images-idx3-ubyte.gz"))
    (_,), labels = read_idx(os.path.join(idx, f"{prefix}-labels-idx1-ubyte.gz"))
    size = height * width
    for i in range(min(count, n)):
        folder = os.path.join(out, CLASSES[labels[i]])
        os.makedirs(folder, exist_ok=True)  # only classes that get an image: an empty one is an error
        path = os.path.join(folder, f"{i:05d}.png")
        with open(path, "wb") as f:
            f.write(png_gray(width, height, images[i * size:(i + 1) * size]))
    return min(count, n)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idx", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--out", default=data_root())
    parser.add_argument("--train", type=int, default=60000)
    parser.add_argument("--test", type=int, default=10000)
    args = parser.parse_args()
    root = os.path.join(args.out, "fashion_mnist_png")
    train = write_split(args.idx, "train", os.path.join(root, "train"), args.train)
    test = write_split(args.idx, "t10k", os.path.join(root, "test"), args.test)
    print(f"{root}: {train} training and {test} test images")


if __name__ == "__main__":
    main()
