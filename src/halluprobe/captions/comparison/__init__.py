"""`halluprobe decoding`: caption runs of decoding methods compared with their baselines (CHAIR, length, PROVE), paired."""
