-- Health of an Argo CD Application, as the Argo CD documentation gives it ("Argocd App").
-- Argo CD 1.8 stopped assessing Application health, so without this the sync waves of the
-- root app would not wait for a child Application (Training Operator, Multus, the webhook) to
-- be healthy before starting the next wave.
local hs = {}
hs.status = "Progressing"
hs.message = ""
if obj.status ~= nil then
  if obj.status.health ~= nil then
    hs.status = obj.status.health.status
    if obj.status.health.message ~= nil then
      hs.message = obj.status.health.message
    end
  end
end
return hs
