// The consumer of `tools/snippets/check-snippets.sh --traits`: the trait
// modules' doc-comment examples are compiled beside this file, each in its own
// function, and never run.
print("Sluice trait modules' doc-comment examples: compiled, not run")
