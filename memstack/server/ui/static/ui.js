// The server writes every time in the viewer's zone and reads the as-of field in it, so
// it must know the zone: the browser's is kept in a cookie. A page drawn before the
// cookie said so (the first visit, or after travelling) is drawn again once.
"use strict";

const ZONE_COOKIE = "memstack_ui_tz";

function tellZone() {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (!zone || document.body.dataset.zone === zone) { return; }
  document.cookie = `${ZONE_COOKIE}=${zone}; path=/ui; max-age=31536000; samesite=lax`;
  // At most one redraw per zone: a zone the server does not know stays UTC, not a loop.
  const shown = document.querySelector("time[datetime], #as-of");
  if (shown && sessionStorage.getItem(ZONE_COOKIE) !== zone) {
    sessionStorage.setItem(ZONE_COOKIE, zone);
    window.location.reload();
  }
}

document.addEventListener("DOMContentLoaded", tellZone);
