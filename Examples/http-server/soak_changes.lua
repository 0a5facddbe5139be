-- soak_changes.lua — wrk script of the soak (soak.sh): POST
-- /docs/soak-N/changed over $SOAK_DOCS documents in turn; every 202's body
-- ("queued doc=ID seq=N") goes to $SOAK_OUT/changes-<thread>.txt for
-- soak_check.py.
local counter = 0

function setup(thread)
    counter = counter + 1
    thread:set("id", counter)
end

function init(args)
    out = io.open(os.getenv("SOAK_OUT") .. "/changes-" .. id .. ".txt", "w")
    out:setvbuf("line")
    docs = tonumber(os.getenv("SOAK_DOCS") or "50")
    n = id * 7
end

function request()
    n = n + 1
    return wrk.format("POST", "/docs/soak-" .. (n % docs) .. "/changed", nil, "")
end

function response(status, headers, body)
    if status == 202 then
        out:write(body)
    else
        out:write("status ", status, "\n")
    end
end
