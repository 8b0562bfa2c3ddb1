-- Argo CD health of tokenfleet.io/ModelAdapter (Lua 5.1, as Argo CD runs it).
-- Healthy: Ready (verified, and its base serves adapters). Progressing: not reported yet, or
-- its signature is still being checked. Degraded: refused (a tampered or foreign-signed
-- adapter never loads) or its base cannot serve it; the message says which.
local hs = {}
local status = obj.status
local ready = nil
if status ~= nil and status.conditions ~= nil then
  for _, c in ipairs(status.conditions) do
    if c.type == "Ready" then ready = c end
  end
end
local generation = obj.metadata and obj.metadata.generation
if ready == nil or (generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation)) then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to report"
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = "verified; loaded on " .. tostring(status.loadedReplicas or 0) .. " replica(s)"
  return hs
end
if ready.reason == "Verifying" then
  hs.status = "Progressing"
else
  hs.status = "Degraded"
end
hs.message = (ready.reason or "") .. ": " .. (ready.message or "")
return hs
