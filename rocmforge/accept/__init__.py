"""GPU acceptance: prove on a node's GPUs that a built torch works, and keep the proof."""
