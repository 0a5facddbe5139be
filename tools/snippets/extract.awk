# extract.awk — writes every fenced code block of the Markdown files given as
# arguments into OUT/NNNN.block and one line per block into OUT/index:
#
#   NNNN <language or "-"> <file> <line of the opening fence> <prose>
#
# <prose> is "prints" when the text between the previous block and this one
# contains the word "prints" (how the README introduces an expected output),
# "-" otherwise. A fence is ``` or ~~~ (3 or more), indented or not; the
# block's lines lose the indentation of their fence.
#
# Usage: awk -v OUT=DIR [-v FIRST=N] -f extract.awk FILE...  (FIRST: the first
# block's number, 1 by default)

function flush_prose() { prose = "-" }

BEGIN { n = FIRST ? FIRST - 1 : 0 }

FNR == 1 { in_block = 0; flush_prose() }

{
    line = $0
    if (!in_block) {
        if (match(line, /^[ \t]*(```+|~~~+)/)) {
            indent = line; sub(/[^ \t].*$/, "", indent)
            fence = substr(line, RSTART + length(indent), RLENGTH - length(indent))
            info = substr(line, RSTART + RLENGTH)
            sub(/^[ \t]+/, "", info); sub(/[ \t].*$/, "", info)
            if (info == "") info = "-"
            n++
            name = sprintf("%04d", n)
            file = OUT "/" name ".block"
            printf "" > file
            print name, info, FILENAME, FNR, prose >> (OUT "/index")
            in_block = 1
            flush_prose()
            next
        }
        if (line ~ /(^|[^A-Za-z])prints([^A-Za-z]|$)/) prose = "prints"
        next
    }
    # inside a block: a closing fence is the same character, at least as long
    stripped = line; sub(/^[ \t]+/, "", stripped)
    if (index(stripped, fence) == 1) {
        rest = substr(stripped, length(fence) + 1)
        gsub(substr(fence, 1, 1), "", rest)
        if (rest ~ /^[ \t]*$/) {
            close(file)
            in_block = 0
            next
        }
    }
    if (indent != "" && index(line, indent) == 1) line = substr(line, length(indent) + 1)
    print line >> file
}

END {
    if (in_block) {
        print "extract.awk: unterminated code block in " FILENAME > "/dev/stderr"
        exit 1
    }
}
