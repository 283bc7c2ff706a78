"""Build telemetry: ninja progress and ETA, process-tree samples, stall alarms, the timeline."""
