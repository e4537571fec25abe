#pragma once
// Random image augmentation of training batches ([data.augment], data.name = "image_folder"), as
// torchvision's RandomCrop(padding), RandomHorizontalFlip, RandomRotation and ColorJitter
// (brightness, contrast) applied in that order to images in [0, 1], before normalization.
//
// Every draw is a counter-based Philox function of (seed, epoch, sample index) and of nothing
// else: not of the batch, the rank or the thread that augments it. A resumed run therefore sees
// the batches an uninterrupted one saw, and a sample is augmented alike whichever rank takes it.
#include <cstdint>
#include <span>

#include "libgenesis/core/tensor.h"

namespace genesis::data {

struct AugmentOptions {
  int64_t crop_padding = 0;  // pixels of zeros on each side, then a random crop of the image's size; 0 = off
  bool flip = false;         // mirror left-right with probability 0.5
  double rotation = 0;       // degrees: an angle uniform in [-rotation, rotation], counter-clockwise; 0 = off
  double brightness = 0;     // a factor uniform in [max(0, 1 - brightness), 1 + brightness]; 0 = off
  double contrast = 0;       // a factor uniform in [max(0, 1 - contrast), 1 + contrast]; 0 = off
  bool enabled() const { return crop_padding > 0 || flip || rotation > 0 || brightness > 0 || contrast > 0; }
  bool operator==(const AugmentOptions&) const = default;
};

// What one sample's augmentation does; the identity by default.
struct AugmentDraw {
  // The crop's offset from the unpadded image: output pixel (y, x) is input (y + shift_y,
  // x + shift_x), zero outside; each in [-crop_padding, crop_padding].
  int64_t shift_x = 0, shift_y = 0;
  bool flip = false;      // after the crop: output column x is column width - 1 - x
  double angle = 0;       // degrees, counter-clockwise about the image's centre
  double brightness = 1;  // pixels times this, clamped to [0, 1]
  double contrast = 1;    // blended with the image's mean gray: c * x + (1 - c) * mean, clamped to [0, 1]
  bool operator==(const AugmentDraw&) const = default;
};

// Applies `draw` to one image of `channels` x `height` x `width` floats in place: the crop and
// the flip (one integer remap), the rotation (bilinear, zeros outside, about the centre of
// the pixel grid, so that 90 degrees maps pixels onto pixels), then brightness, then contrast
// (torchvision's ColorJitter applies the two in a random order; here it is fixed). The mean
// gray is the image's mean, of the BT.601 gray (0.299, 0.587, 0.114) for three channels.
void augment_image(const AugmentDraw& draw, float* image, int64_t channels, int64_t height, int64_t width);

class ImageAugment {
 public:
  ImageAugment(const AugmentOptions& options, uint64_t seed);
  const AugmentOptions& options() const { return options_; }
  // Sample `sample`'s draw in epoch `epoch`.
  AugmentDraw draw(int64_t sample, int64_t epoch) const;
  // Augments images [N, C, H, W] (f32, contiguous, in [0, 1]) in place, image i as sample
  // samples[i] of epoch `epoch`, in parallel over the images on the OpenMP threads.
  void apply(Tensor& images, std::span<const int64_t> samples, int64_t epoch) const;

 private:
  AugmentOptions options_;
  uint64_t key_;
};

}  // namespace genesis::data
