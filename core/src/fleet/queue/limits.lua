
-- Every value a step stores comes from its arguments: none may be larger
-- than this (library.rs, MAX_ARGUMENT_BYTES), so a caller cannot grow Redis
-- by a huge value through a step. Checked before the step writes anything
-- (Redis does not roll a function back when it fails halfway).
local MAX_ARGUMENT_BYTES = 65536

local function bounded(step, ARGV)
  for i = 1, #ARGV do
    if #ARGV[i] > MAX_ARGUMENT_BYTES then
      error({err = 'ERR bucketscan queue step ' .. step .. ': argument ' .. i .. ' is ' .. #ARGV[i]
        .. ' bytes, over the limit of ' .. MAX_ARGUMENT_BYTES .. ' bytes a queue step stores'})
    end
  end
end
