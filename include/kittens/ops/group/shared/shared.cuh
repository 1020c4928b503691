// Included inside struct group<N_WARPS> (see group.cuh): no pragma once, no namespaces.
