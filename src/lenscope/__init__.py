"""lenscope: see what a JAX model learns, with analyses that share the trainer's lifecycle."""
