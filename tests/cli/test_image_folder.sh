#!/usr/bin/env bash
# `[data] name = "image_folder"` end to end (issue 38): a small Fashion-MNIST folder from
# data/make_image_folder.py trains recipes/fashion_mnist_folder_cnn.toml (a smaller CNN) for a few
# steps and eval reproduces its accuracy with the checkpoint's classes and statistics after the
# training folder changed (and so does a resumed run); data.val_fraction splits; RGB input
# resized from the gray 28x28 PNGs trains; [data.augment] trains, resumes byte for byte and
# splits over 2 ranks; bad folders and recipes exit 2 with one line naming the folder or file: a missing root,
# an empty class folder, a corrupt PNG (or skipped with data.skip_bad), too few model.num_classes,
# data.mean of the wrong length, and a model.input_shape that is no image (refused before the run
# directory is made).
#   tests/cli/test_image_folder.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
recipe="$src/recipes/fashion_mnist_folder_cnn.toml"
export OMP_NUM_THREADS=1

python3 "$src/data/make_image_folder.py" --out "$work" --train 400 --test 100 >/dev/null || fail "make_image_folder.py failed"
data="$work/fashion_mnist_png"
short=(--set "data.path=$data" --set training.steps=40 --set training.log_every=10 --set training.checkpoint_every=0
       --set training.batch_size=32 --set "model.channels=[8]" --set model.fc=32)

# 1. A few steps train and evaluate; eval of the checkpoint gives the same accuracy.
"$genesis" train "$recipe" --out "$work/run" "${short[@]}" >/dev/null 2>"$work/train.err"; rc=$?
check "train on an image folder" 0 $rc
[ $rc -eq 0 ] || cat "$work/train.err"
grep -q "400 training images, 100 test images ($data/test); as \[1, 28, 28\], normalized with mean" "$work/train.err" \
  && ok "the note counts the images" || fail "no note of the images: $(cat "$work/train.err")"
acc=$(sed -n 's/.*"accuracy": *\([0-9.eE+-]*\).*/\1/p' "$work/run/summary.json" | head -n 1)
awk -v a="$acc" 'BEGIN { exit !(a > 0.3) }' && ok "40 steps: test accuracy $acc > 0.3 (10 classes)" || fail "accuracy '$acc' <= 0.3"
json=$("$genesis" eval --checkpoint "$work/run" 2>/dev/null)
echo "$json" | grep -q "\"accuracy\":$acc" && ok "eval reproduces the final accuracy" || fail "eval printed '$json', expected $acc"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["classes"][0] == "0_tshirt_top" and len(j["classes"]) == 10 and len(j["mean"]) == 1, j' \
  "$work/run/checkpoints/latest/data.json" && ok "the checkpoint keeps the class names and statistics" \
  || fail "checkpoint data.json: $(cat "$work/run/checkpoints/latest/data.json")"
# 200 white training images would change the statistics: eval keeps the checkpoint's.
python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import make_image_folder as m
for i in range(200): open(f"{sys.argv[2]}/x{i}.png", "wb").write(m.png_gray(28, 28, b"\xff" * 784))' \
  "$src/data" "$data/train/1_trouser"
json=$("$genesis" eval --checkpoint "$work/run" 2>/dev/null)
echo "$json" | grep -q "\"accuracy\":$acc" && ok "eval after the training folder changed: the checkpoint's statistics" \
  || fail "eval after the training folder changed printed '$json', expected $acc"
# So does a resumed run: its checkpoints carry the first run's statistics, not the grown folder's.
cp "$work/run/checkpoints/latest/data.json" "$work/data_before.json"
"$genesis" train "$recipe" --out "$work/run" --resume "${short[@]}" --set training.steps=50 -q >/dev/null \
  2>"$work/resume.err" || fail "resume after the training folder changed: $(cat "$work/resume.err")"
cmp -s "$work/data_before.json" "$work/run/checkpoints/latest/data.json" \
  && ok "a resumed run encodes with its checkpoint's classes and statistics" || fail "the resumed run's data.json changed"
rm -f "$data"/train/1_trouser/x*.png

# genesis predict on the test folder: one JSON line per image, whose classes (the folder each
# image sits in being its label) score the accuracy eval reports; a file that is no image exits 2.
"$genesis" predict --checkpoint "$work/run" "$data/test" >"$work/predict.jsonl" 2>"$work/predict.err"
check "predict on the test folder" 0 $?
acc=$("$genesis" eval --checkpoint "$work/run" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["accuracy"])')
python3 - "$work/predict.jsonl" "$acc" <<'PY' && ok "predict: 100 images with class names, scoring eval's accuracy $acc" \
  || fail "predict on images: $(head -c 300 "$work/predict.jsonl") $(cat "$work/predict.err")"
import json, os, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) == 100 and all(abs(sum(r["probabilities"].values()) - 1) < 1e-9 for r in rows), rows[:1]
accuracy = sum(r["class"] == os.path.basename(os.path.dirname(r["input"])) for r in rows) / len(rows)
assert abs(accuracy - float(sys.argv[2])) < 1e-12, (accuracy, sys.argv[2])
PY
one=$(find "$data/test" -name '*.png' | sort | head -n 1)
"$genesis" predict --checkpoint "$work/run" "$one" | grep -q "\"input\":\"$one\"" && ok "predict on one image file" \
  || fail "predict on $one"
printf 'not an image' >"$work/fake.png"
"$genesis" predict --checkpoint "$work/run" "$work/fake.png" >/dev/null 2>"$work/err"
[ $? -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "fake.png: neither a PNG nor a JPEG" "$work/err" \
  && ! grep -q "skip_bad" "$work/err" && ok "predict on a file that is no image: exit 2, '$(cut -c1-90 "$work/err")'" || fail "predict fake.png: $(cat "$work/err")"

# A seeded share of each class's training images as the validation set.
"$genesis" train "$recipe" --out "$work/val" "${short[@]}" --set data.val_fraction=0.25 --set eval.split=val \
  >/dev/null 2>"$work/val.err"; rc=$?
[ $rc -eq 0 ] && grep -q "300 training images, 100 validation images (data.val_fraction)" "$work/val.err" \
  && ok "data.val_fraction = 0.25: 300 training and 100 validation images" || fail "val_fraction: rc $rc, $(cat "$work/val.err")"

# The gray PNGs as RGB input of another size: replicated channels, resized.
"$genesis" train "$recipe" --out "$work/rgb" "${short[@]}" --set "model.input_shape=[3, 20, 20]" --set training.steps=5 \
  >/dev/null 2>"$work/rgb.err"; rc=$?
[ $rc -eq 0 ] && grep -q "as \[3, 20, 20\]" "$work/rgb.err" && ok "RGB 20x20 input from gray 28x28 PNGs" \
  || fail "rgb: rc $rc, $(cat "$work/rgb.err")"

# [data.augment] trains and is noted; a run stopped at step 20 and resumed ends with the
# uninterrupted run's weights byte for byte (each sample's draws depend on the seed, the epoch and
# its index only), and on 2 ranks of 16 it takes the steps of 1 process of 32.
aug=("${short[@]}" --set data.augment.crop_padding=2 --set data.augment.flip=true --set data.augment.rotation=10
     --set data.augment.brightness=0.2 --set data.augment.contrast=0.2 --set training.checkpoint_every=20)
"$genesis" train "$recipe" --out "$work/aug" "${aug[@]}" >/dev/null 2>"$work/aug.err"; rc=$?
[ $rc -eq 0 ] && grep -q "training batches augmented (crop padding 2, flip, rotation 10 degrees, brightness 0.2, contrast 0.2)" \
  "$work/aug.err" && ok "[data.augment] trains, noted" || fail "augmented run: rc $rc, $(cat "$work/aug.err")"
mkdir -p "$work/aug_resumed/checkpoints"
cp -r "$work/aug/checkpoints/step_00000020" "$work/aug_resumed/checkpoints/"
ln -s step_00000020 "$work/aug_resumed/checkpoints/latest"
cp "$work/aug/recipe.toml" "$work/aug_resumed/recipe.toml"
"$genesis" train "$recipe" --out "$work/aug_resumed" --resume "${aug[@]}" -q >/dev/null 2>"$work/aug_resumed.err" \
  || fail "augmented resume: $(cat "$work/aug_resumed.err")"
cmp -s "$work/aug/checkpoints/step_00000040/model.safetensors" "$work/aug_resumed/checkpoints/step_00000040/model.safetensors" \
  && ok "augmented: resumed at step 20, the final weights are byte-identical" || fail "augmented: final weights differ after resume"
ranks=(--set training.steps=20 --set training.log_every=1 --set run.threads=1 -q)
"$genesis" train "$recipe" --out "$work/aug1" "${aug[@]}" "${ranks[@]}" >/dev/null 2>&1 \
  && "$genesis" train "$recipe" --out "$work/aug2" "${aug[@]}" "${ranks[@]}" --set training.batch_size=16 \
    --nproc-per-node 2 >/dev/null 2>"$work/aug2.err"
losses_match "$work/aug1" "$work/aug2" 20 && ok "augmented on 2 ranks x 16 = 1 process x 32: losses within 1e-5" \
  || fail "augmented over 2 ranks: $(cat "$work/aug2.err")"

# 2. Bad input: exit 2, one line on stderr naming what, where and what to do.
bad "a missing root" "$work/nowhere: no such directory" --set "data.path=$work/nowhere"
mkdir "$data/train/zz_empty"
bad "an empty class folder" "train/zz_empty: no .png, .jpg or .jpeg files in the class folder"
rmdir "$data/train/zz_empty"
mkdir -p "$work/none/train"
bad "no images at all" "none/train: no class folders" --set "data.path=$work/none"
first=$(ls "$data/train/3_dress" | head -n 1)
cp "$data/train/3_dress/$first" "$work/saved.png"
head -c 60 "$work/saved.png" >"$data/train/3_dress/$first"
bad "a truncated PNG" "3_dress/$first: PNG.*set data.skip_bad = true"
"$genesis" train "$recipe" --out "$work/skip" "${short[@]}" --set data.skip_bad=true --set training.steps=2 \
  >/dev/null 2>"$work/skip.err"; rc=$?
[ $rc -eq 0 ] && grep -q "399 training images.*1 unreadable image skipped (data.skip_bad), the first: .*3_dress/$first" \
  "$work/skip.err" && ok "data.skip_bad = true: the truncated PNG skipped and named" || fail "skip_bad: rc $rc, $(cat "$work/skip.err")"
cp "$work/saved.png" "$data/train/3_dress/$first"
bad "a negative data.augment.rotation" "data.augment.rotation" --set data.augment.rotation=-5
"$genesis" train "$src/recipes/fashion_mnist_mlp.toml" --out "$work/aug_mnist" --set data.augment.flip=true -q \
  >/dev/null 2>"$work/err"; rc=$?
[ $rc -eq 2 ] && grep -q "\[data.augment\] augments the images of data.name = \"image_folder\"" "$work/err" \
  && [ ! -e "$work/aug_mnist" ] && ok "[data.augment] with fashion_mnist: a recipe error before the run directory" \
  || fail "[data.augment] with fashion_mnist: rc $rc, $(cat "$work/err")"
bad "model.num_classes below the class folders" "model.num_classes = 4 is fewer than the 10 class folders" \
  --set model.num_classes=4
bad "data.mean of another length than the channels" "data.mean and data.std need one value per channel" \
  --set "data.mean=[0.5, 0.5]" --set "data.std=[0.5, 0.5]"
"$genesis" train "$recipe" --out "$work/shape" "${short[@]}" --set "model.input_shape=[2, 28, 28]" -q >/dev/null \
  2>"$work/err"; rc=$?
[ $rc -eq 2 ] && grep -q "with 1 (gray) or 3 (RGB) channels" "$work/err" && [ ! -e "$work/shape" ] \
  && ok "model.input_shape with 2 channels: a recipe error before the run directory" \
  || fail "input_shape [2, 28, 28]: rc $rc, $(cat "$work/err"), run directory $(ls -d "$work/shape" 2>&1)"

finish "image_folder"
