"""Object HalBench (RLAIF-V): CHAIR over its 300 COCO images, read by RLAIF-V's own rules."""
