"""Recording a forward pass: wrapping forwards, the call stack, serialising, pruning, writing files."""
