"""The "tape" compiler: trace once with autograd, replay without boxing."""
