-- Argo CD health of tokenfleet.io/InferencePool (Lua 5.1, as Argo CD runs it).
-- Degraded: the Degraded condition is True (a zone lost, replicas.max reached, the pool
-- claimed twice). Healthy: Ready and not progressing. Otherwise Progressing.
local hs = {}

local function condition(status, kind)
  if status.conditions == nil then return nil end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then return c end
  end
  return nil
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to report"
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local degraded = condition(status, "Degraded")
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = (degraded.reason or "") .. ": " .. (degraded.message or "")
  return hs
end
local ready = condition(status, "Ready")
local progressing = condition(status, "Progressing")
if ready ~= nil and ready.status == "True" and (progressing == nil or progressing.status ~= "True") then
  hs.status = "Healthy"
  hs.message = tostring(status.readyReplicas or 0) .. "/" .. tostring(status.replicas or 0) ..
    " replicas ready"
  return hs
end
hs.status = "Progressing"
if progressing ~= nil and progressing.status == "True" then
  hs.message = progressing.message or ""
elseif ready ~= nil then
  hs.message = ready.message or ""
else
  hs.message = "waiting for replicas"
end
return hs
