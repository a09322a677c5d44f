/* The status page's refresh (src/http/page/mod.rs inlines it in <script>):
   every data-refresh-secs seconds of #upd (the server's REFRESH_SECS), fetch
   ?part=live and swap it for #live; a changed policy (data-sha) reloads the
   whole page for the new text. Everything after this header is sent with its
   lines joined: no // comments, and a line never ends inside a statement that
   needs the newline. */
(function(){var l=document.getElementById('live'),u=document.getElementById('upd'),s=u&&+u.getAttribute('data-refresh-secs');
if(!l||!window.fetch||!(s>0))return;u.textContent='live: refreshed every '+s+'s';
setInterval(function(){fetch('?part=live',{cache:'no-store'}).then(function(r){if(!r.ok)throw r.status;return r.text()})
.then(function(t){var d=document.createElement('div');d.innerHTML=t;var n=d.firstElementChild;if(!n||n.id!=='live')return;
if(n.getAttribute('data-sha')!==l.getAttribute('data-sha')){location.reload();return}
l.replaceWith(n);l=n;u.textContent='live: updated '+new Date().toLocaleTimeString()})
.catch(function(e){u.textContent='live: update failed ('+e+'), retrying'})},s*1000)})();
