"""Projection: a model's throughput and device-days on a device nobody here measured, with an interval
from the validated error. The devices by their datasheets (`catalog`: benchbench.meters.peaks' figures
by a short id, or a user's TOML file), the method (`method`: the source's measured time split into
tensor compute and the rest, each scaled by the datasheets' ratios, never faster than the target's
roofline), its constants fitted on timm's published benchmark tables (`fit`, `constants.json`), those
tables read (`tables`), a measured throughput (a record's, a `profile` line's) projected with its interval
(`source`), and the validation on a pair of them with the target left out of the fit
(`validate`). A projection is labelled as one and never written as a measurement.

Imports: meters (datasheet peaks), `errors`, numpy and pandas; never the store, plans, the run layer
or above.
"""
