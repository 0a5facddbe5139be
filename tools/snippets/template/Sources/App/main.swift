// The consumer of tools/snippets/check-snippets.sh: the documentation's
// snippets are compiled beside this file, each in its own function, and never
// run (the C example is run by the script itself).
print("Sluice documentation snippets: compiled, not run")
