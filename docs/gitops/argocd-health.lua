-- Argo CD health check for BucketScan (bucketscan.dev/v1alpha1), read from
-- the conditions the operator writes (kstatus conventions):
--   Ready=True                 Healthy     (the result is complete)
--   Stalled=True               Degraded    (failed, or needs a person: a name
--                                           taken by another workload, no progress)
--   Ready=False, Suspended     Suspended   (spec.suspend)
--   otherwise                  Progressing (planning, scanning, merging, or
--                                           waiting on something that may pass)
-- Install it as argocd-cm's resource.customizations.health.bucketscan.dev_BucketScan
-- (docs/operations.md, "GitOps health"). Tested against real BucketScans in
-- each phase by operator/tests/gitops_health.rs.
local hs = { status = "Progressing", message = "Waiting for the operator to report" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end
local function condition(kind)
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end
local function said(c)
  local message = c.message or ""
  if message == "" then
    return c.reason or ""
  end
  return (c.reason or "") .. ": " .. message
end
local ready = condition("Ready")
local stalled = condition("Stalled")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or "Complete"
  return hs
end
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled)
  return hs
end
if ready ~= nil and ready.reason == "Suspended" then
  hs.status = "Suspended"
  hs.message = said(ready)
  return hs
end
if ready ~= nil then
  hs.message = said(ready)
end
return hs
